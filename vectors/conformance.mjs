#!/usr/bin/env node
// An independent implementation of the kernel's canonical JSON and identities,
// in Node.js with no npm dependencies, written from adr/0001 and adr/0014 (not
// from the Python code). It recomputes every vector in vectors/ and exits 1 on
// the first disagreement it reports (all are listed), 0 when all agree.
//
//   node vectors/conformance.mjs [--vectors DIR] [--root REPO_ROOT]
//
// What a JavaScript integrator must get right, each exercised by a vector:
// - integers are arbitrary precision (BigInt): 2**53 + 1 must not round;
// - object keys sort by Unicode code point. Array.prototype.sort() compares
//   UTF-16 code units, which puts U+10000.. before U+E000..U+FFFF: wrong;
// - only ", \ and C0 controls are escaped (\b \f \n \r \t, else \u00xx
//   lowercase); "/", DEL, U+2028/U+2029 and everything else stay raw UTF-8;
// - spans count code points. String.prototype.slice counts UTF-16 units, so
//   text after a non-BMP character (an emoji, U+1D7D8) is off by one per
//   such character: use Array.from(text) or codePointAt.
// - the strict parser refuses what JSON.parse accepts: duplicate keys (last
//   wins in JSON.parse), floats, lone surrogates, big ints past 4300 digits.

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const MAX_DOCUMENT_BYTES = 16 * 1024 * 1024;
const MAX_DEPTH = 64;
const MAX_INT_DIGITS = 4300;

class Refused extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
  }
}

// --- strict parsing ------------------------------------------------------------

function isWellFormed(s) {
  if (typeof s.isWellFormed === "function") return s.isWellFormed();
  return !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);
}

export function parseStrict(bytes) {
  if (bytes.length > MAX_DOCUMENT_BYTES) {
    throw new Refused("document_too_large", `${bytes.length} bytes`);
  }
  let text;
  try {
    // ignoreBOM keeps a leading BOM in the text, where the grammar refuses it.
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new Refused("invalid_utf8", "not strict UTF-8");
  }
  let pos = 0;
  let loneSurrogate = false;
  const malformed = (what) => {
    throw new Refused("malformed_json", `${what} at offset ${pos}`);
  };
  const ws = () => {
    while (pos < text.length && " \t\n\r".includes(text[pos])) pos++;
  };
  const literal = (word, value) => {
    if (text.startsWith(word, pos)) {
      pos += word.length;
      return value;
    }
    return malformed("unexpected token");
  };

  function parseString() {
    pos++; // opening quote
    let out = "";
    for (;;) {
      if (pos >= text.length) malformed("unterminated string");
      const ch = text[pos];
      const unit = text.charCodeAt(pos);
      if (ch === '"') {
        pos++;
        break;
      }
      if (unit < 0x20) malformed("raw control character in string");
      if (ch !== "\\") {
        out += ch;
        pos++;
        continue;
      }
      const esc = text[pos + 1];
      const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
      if (esc in simple) {
        out += simple[esc];
        pos += 2;
      } else if (esc === "u") {
        const hex = text.slice(pos + 2, pos + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) malformed("bad \\u escape");
        out += String.fromCharCode(parseInt(hex, 16));
        pos += 6;
      } else {
        malformed("bad escape");
      }
    }
    if (!isWellFormed(out)) loneSurrogate = true; // refused after the parse, like the reference
    return out;
  }

  function parseNumber() {
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/.exec(text.slice(pos, pos + 10_000_000));
    if (!m) {
      if (text.startsWith("-Infinity", pos)) throw new Refused("constant_forbidden", "-Infinity");
      malformed("bad number");
    }
    pos += m[0].length;
    if (m[2] !== undefined || m[3] !== undefined) {
      throw new Refused("float_forbidden", `float literal ${m[0].slice(0, 40)}`);
    }
    const digits = m[0].replace("-", "").length;
    if (digits > MAX_INT_DIGITS) {
      throw new Refused("integer_too_large", `${digits} digits exceeds ${MAX_INT_DIGITS}`);
    }
    return BigInt(m[0]);
  }

  function parseValue(depth) {
    ws();
    const ch = text[pos];
    if (ch === "{" || ch === "[") {
      if (depth + 1 > MAX_DEPTH) throw new Refused("too_deep", `nesting exceeds ${MAX_DEPTH}`);
    }
    if (ch === "{") {
      pos++;
      const pairs = [];
      ws();
      if (text[pos] === "}") {
        pos++;
        return new Map();
      }
      for (;;) {
        ws();
        if (text[pos] !== '"') malformed("expected a key");
        const key = parseString();
        ws();
        if (text[pos] !== ":") malformed("expected ':'");
        pos++;
        pairs.push([key, parseValue(depth + 1)]);
        ws();
        if (text[pos] === ",") {
          pos++;
          continue;
        }
        if (text[pos] === "}") {
          pos++;
          break;
        }
        malformed("expected ',' or '}'");
      }
      // Duplicates are found when the object closes, as the reference's hook does.
      const map = new Map();
      for (const [key, value] of pairs) {
        if (map.has(key)) throw new Refused("duplicate_key", `duplicate object key ${JSON.stringify(key)}`);
        map.set(key, value);
      }
      return map;
    }
    if (ch === "[") {
      pos++;
      const items = [];
      ws();
      if (text[pos] === "]") {
        pos++;
        return items;
      }
      for (;;) {
        items.push(parseValue(depth + 1));
        ws();
        if (text[pos] === ",") {
          pos++;
          continue;
        }
        if (text[pos] === "]") {
          pos++;
          break;
        }
        malformed("expected ',' or ']'");
      }
      return items;
    }
    if (ch === '"') return parseString();
    if (ch === "t") return literal("true", true);
    if (ch === "f") return literal("false", false);
    if (ch === "n") return literal("null", null);
    if (ch === "N" && text.startsWith("NaN", pos)) throw new Refused("constant_forbidden", "NaN");
    if (ch === "I" && text.startsWith("Infinity", pos)) throw new Refused("constant_forbidden", "Infinity");
    if (ch === "-" || (ch >= "0" && ch <= "9")) return parseNumber();
    return malformed("unexpected token");
  }

  // The reference counts nesting before it parses, so depth wins over
  // anything later in the document; a bracket scan outside strings does the same.
  let depth = 0;
  let deepest = 0;
  for (let i = 0, inString = false; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "[" || c === "{") deepest = Math.max(deepest, ++depth);
    else if (c === "]" || c === "}") depth--;
  }
  if (deepest > MAX_DEPTH) throw new Refused("too_deep", `nesting depth ${deepest} exceeds ${MAX_DEPTH}`);

  const value = parseValue(0);
  ws();
  if (pos !== text.length) malformed("extra data");
  if (loneSurrogate) throw new Refused("lone_surrogate", "string contains a lone surrogate");
  return value;
}

// --- canonical bytes -----------------------------------------------------------

export function compareCodePoints(a, b) {
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const x = a.codePointAt(i);
    const y = b.codePointAt(j);
    if (x !== y) return x < y ? -1 : 1;
    i += x > 0xffff ? 2 : 1;
    j += y > 0xffff ? 2 : 1;
  }
  if (i < a.length) return 1;
  if (j < b.length) return -1;
  return 0;
}

function quote(s) {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (cp < 0x20) out += "\\u" + cp.toString(16).padStart(4, "0");
    else out += ch;
  }
  return out + '"';
}

function serialize(value) {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "string") {
    if (!isWellFormed(value)) throw new Refused("lone_surrogate", "lone surrogate");
    return quote(value);
  }
  if (Array.isArray(value)) return "[" + value.map(serialize).join(",") + "]";
  if (value instanceof Map) {
    const keys = [...value.keys()].sort(compareCodePoints);
    return "{" + keys.map((k) => quote(k) + ":" + serialize(value.get(k))).join(",") + "}";
  }
  if (typeof value === "number") throw new Refused("float_forbidden", "JavaScript numbers are not canonical; use BigInt");
  throw new Refused("unsupported_type", typeof value);
}

export function canonical(value) {
  return new TextEncoder().encode(serialize(value));
}

const toHex = (bytes) => Buffer.from(bytes).toString("hex");
const sha256Hex = (bytes) => createHash("sha256").update(bytes).digest("hex");
export const digest = (value) => sha256Hex(canonical(value));

// --- identity payloads (adr/0001, ADR-0229 §13), from the record's fields ----------

const get = (m, k) => {
  if (!(m instanceof Map) || !m.has(k)) throw new Error(`record has no field ${k}`);
  return m.get(k);
};
const obj = (entries) => new Map(entries);
const pick = (m, names) => obj(names.map((n) => [n, get(m, n)]));

const span = (s) => pick(s, ["start", "end"]);
const spans = (list) => list.map(span);
const binding = (b) => obj([["name", get(b, "name")], ["value", get(b, "value")], ["unit", get(b, "unit")], ["span", span(get(b, "span"))]]);
const relation = (r) => pick(r, ["result", "operator", "operands"]);
const target = (t) => pick(t, ["name", "role"]);

function framePayload(f) {
  return obj([
    ["source_text", get(f, "source_text")],
    ["bindings", get(f, "bindings").map(binding)],
    ["relations", get(f, "relations").map(relation)],
    ["targets", get(f, "targets").map(target)],
    ["evidence_spans", spans(get(f, "evidence_spans"))],
  ]);
}

function deltaPayload(d) {
  return obj([
    ["base_frame_digest", get(d, "base_frame_digest")],
    ["removed_bindings", get(d, "removed_bindings")],
    ["added_bindings", get(d, "added_bindings").map(binding)],
    ["removed_relations", get(d, "removed_relations")],
    ["added_relations", get(d, "added_relations").map(relation)],
    ["removed_targets", get(d, "removed_targets")],
    ["added_targets", get(d, "added_targets").map(target)],
    ["evidence_spans", spans(get(d, "evidence_spans"))],
  ]);
}

const without = (m, field) => obj([...m].filter(([k]) => k !== field));

// The record's own id field, blanked to "" (explanations never enter a payload).
const blanked = (idField, m, names) => obj([[idField, ""], ...names.map((n) => [n, get(m, n)])]);

const runInputPayload = (ri) => pick(ri, [
  "problem_frame_digest", "original_contract_assessment_id", "residual_ids", "gate_decision_id",
  "budget_id", "operator_set_id", "operator_set_version",
]);

function candidateContent(c) {
  return obj([
    ["original_problem_frame_digest", get(c, "original_problem_frame_digest")],
    ["candidate_problem_frame_digest", get(c, "candidate_problem_frame_digest")],
    ["frame_delta_digest", get(c, "frame_delta_digest")],
    ["bindings", get(c, "candidate_bindings").map(binding)],
    ["relations", get(c, "candidate_relations").map(relation)],
    ["targets", get(c, "candidate_targets").map(target)],
    ["evidence_spans", spans(get(c, "evidence_spans"))],
  ]);
}

export const PAYLOADS = {
  problem_frame: [null, framePayload],
  frame_delta: [null, deltaPayload],
  assessment: ["assessment_id", (a) => obj([
    ["assessment_id", ""], ...["problem_frame_digest", "candidate_organ", "runnable", "missing_bindings", "unresolved_hazards"].map((n) => [n, get(a, n)]),
    ["evidence_spans", spans(get(a, "evidence_spans"))],
  ])],
  residual: ["residual_id", (r) => blanked("residual_id", r, ["assessment_id", "kind", "code", "ordinal"])],
  gate: ["gate_decision_id", (g) => blanked("gate_decision_id", g, ["gate_policy_version", "assessment_id", "residual_ids", "search_permitted"])],
  budget: ["budget_id", (b) => blanked("budget_id", b, ["budget_policy_version", "gate_decision_id", "max_attempts"])],
  run_input: [null, runInputPayload],
  run: ["run_id", (run) => obj([
    ["run_id", ""],
    ["run_policy_version", get(run, "run_policy_version")],
    ["run_input", runInputPayload(get(run, "run_input"))],
    ["input_digest", get(run, "input_digest")],
    ["candidate_attempts", get(run, "candidate_attempts").map((a) => pick(a, [
      "attempt_index", "input_digest", "candidate_digest", "operator_id", "operator_version", "replay_status",
    ]))],
  ])],
  attempt: ["attempt_id", (a) => blanked("attempt_id", a, ["run_id", "attempt_index", "input_digest", "candidate_digest", "operator_id", "operator_version"])],
  candidate: ["candidate_digest", candidateContent],
  reconstruction: ["candidate_reconstruction_digest", (c) => obj([
    ["candidate_reconstruction_digest", ""],
    ["candidate_digest", get(c, "candidate_digest")],
    ["candidate", candidateContent(c)],
    ...["run_id", "attempt_id", "operator_set_id", "operator_set_version", "operator_id", "operator_version"].map((n) => [n, get(c, n)]),
  ])],
  replay_input: ["input_digest", (i) => pick(i, [
    "replay_policy_version", "run_id", "run_policy_version", "attempt_id", "attempt_index",
    "candidate_digest", "candidate_reconstruction_digest", "problem_frame_digest",
    "original_contract_assessment_id", "candidate_organ", "gate_decision_id", "budget_id",
    "operator_set_id", "operator_set_version", "contract_replay_target", "residual_ids",
    "proof_obligation_refs", "schema_versions",
  ])],
  result: ["replay_result_id", (r) => obj([
    ["replay_result_id", ""],
    ...["replay_policy_version", "input_digest", "run_id", "attempt_id", "candidate_digest",
      "contract_replay_assessment_id", "proof_obligation_refs", "proof_replay_refs",
      "replay_disposition", "reason_codes"].map((n) => [n, get(r, n)]),
    ["evidence_spans", spans(get(r, "evidence_spans"))],
  ])],
  refusal: ["replay_refusal_id", (r) => blanked("replay_refusal_id", r, [
    "replay_policy_version", "input_digest", "run_id", "attempt_id", "attempt_index",
    "candidate_digest", "replay_disposition", "reason_codes",
  ])],
  // Seed 000: a request or receipt id hashes every other field of the record.
  verification_request: ["request_id", (r) => without(r, "request_id")],
  verification_receipt: ["receipt_id", (r) => without(r, "receipt_id")],
  // Seed 003: a job's digest hashes the job with the digest itself blanked.
  external_job: ["job_digest", (j) => obj([...j].map(([k, v]) => [k, k === "job_digest" ? "" : v]))],
};

// --- spans -----------------------------------------------------------------------

export const codePointSlice = (text, start, end) => Array.from(text).slice(start, end).join("");
const utf16Offset = (text, cp) => Array.from(text).slice(0, cp).join("").length;
const utf8Offset = (text, cp) => new TextEncoder().encode(codePointSlice(text, 0, cp)).length;

// --- the checks --------------------------------------------------------------------

function main(argv) {
  const here = path.dirname(fileURLToPath(import.meta.url));
  let vectorDir = here;
  let root = path.dirname(here);
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--vectors") vectorDir = argv[++i];
    else if (argv[i] === "--root") root = argv[++i];
    else {
      console.error(`error: usage: unknown argument ${argv[i]}`);
      return 2;
    }
  }
  const failures = [];
  const fail = (where, message) => failures.push(`${where}: ${message}`);
  const load = (name) => parseStrict(readFileSync(path.join(vectorDir, name)));
  const counts = {};
  const count = (k) => (counts[k] = (counts[k] ?? 0) + 1);

  for (const v of get(load("values.json"), "vectors")) {
    const name = `values.json ${get(v, "name")}`;
    try {
      const bytes = canonical(parseStrict(Buffer.from(get(v, "input_hex"), "hex")));
      if (toHex(bytes) !== get(v, "canonical_hex")) fail(name, "canonical bytes differ");
      if (sha256Hex(bytes) !== get(v, "sha256")) fail(name, "sha256 differs");
    } catch (e) {
      fail(name, `refused: ${e.message}`);
    }
    count("values");
  }

  const refused = load("refused.json");
  for (const v of get(refused, "vectors")) {
    const name = `refused.json ${get(v, "name")}`;
    try {
      parseStrict(Buffer.from(get(v, "input_hex"), "hex"));
      fail(name, "accepted; must be refused");
    } catch (e) {
      if (!(e instanceof Refused)) fail(name, `crashed: ${e.message}`);
      else if (e.code !== get(v, "code")) fail(name, `code ${e.code}, expected ${get(v, "code")}`);
    }
    count("refused");
  }
  // Python-only values (non-str keys, float objects, ...) cannot be written as
  // JSON text; the Python suite checks them (tests/test_vectors.py).
  counts["python-only (skipped)"] = get(refused, "python_values").length;

  let utf16Differs = false;
  for (const v of get(load("spans.json"), "vectors")) {
    const text = get(v, "source_text");
    if (BigInt(Array.from(text).length) !== get(v, "code_points")) fail("spans.json", "code point count differs");
    if (BigInt(text.length) !== get(v, "utf16_units")) fail("spans.json", "UTF-16 length differs");
    for (const s of get(v, "spans")) {
      const [start, end] = [Number(get(s, "start")), Number(get(s, "end"))];
      const where = `spans.json [${start},${end})`;
      if (codePointSlice(text, start, end) !== get(s, "text")) fail(where, "code point slice differs");
      if (BigInt(utf16Offset(text, start)) !== get(s, "utf16_start")) fail(where, "utf16_start differs");
      if (BigInt(utf16Offset(text, end)) !== get(s, "utf16_end")) fail(where, "utf16_end differs");
      if (BigInt(utf8Offset(text, start)) !== get(s, "utf8_start")) fail(where, "utf8_start differs");
      if (BigInt(utf8Offset(text, end)) !== get(s, "utf8_end")) fail(where, "utf8_end differs");
      if (text.slice(start, end) !== get(s, "text")) utf16Differs = true;
      count("spans");
    }
  }
  if (!utf16Differs) fail("spans.json", "no vector shows UTF-16 slicing going wrong");

  for (const v of get(load("records.json"), "vectors")) {
    const kind = get(v, "kind");
    const where = `records.json ${kind} ${get(v, "where")}`;
    if (!(kind in PAYLOADS)) {
      fail(where, `unknown record kind ${kind}`);
      continue;
    }
    const [idField, payloadOf] = PAYLOADS[kind];
    try {
      const record = get(v, "record");
      const bytes = canonical(payloadOf(record));
      const recomputed = sha256Hex(bytes);
      const stored = get(v, "stored_id");
      if (toHex(bytes) !== get(v, "payload_canonical_hex")) fail(where, "payload canonical bytes differ");
      if (recomputed !== get(v, "recomputed_id")) fail(where, "recomputed id differs");
      if (idField !== null && get(record, idField) !== stored) fail(where, `stored_id is not the record's ${idField}`);
      const reproduces = stored === null || stored === recomputed;
      if (reproduces !== get(v, "reproduces")) fail(where, `reproduces ${reproduces}, expected ${get(v, "reproduces")}`);
    } catch (e) {
      fail(where, `error: ${e.message}`);
    }
    count(`records`);
  }

  for (const c of get(load("replay.json"), "cases")) {
    const where = `replay.json ${get(c, "name")}`;
    const bundleBytes = readFileSync(path.join(root, get(c, "bundle")));
    if (sha256Hex(bundleBytes) !== get(c, "bundle_sha256")) fail(where, "bundle bytes differ");
    const bundle = parseStrict(bundleBytes);
    const inputs = get(bundle, "inputs");
    const chain = get(bundle, "chain");
    const lines = get(c, "outcome_lines");
    if (lines.length !== inputs.length) fail(where, `${lines.length} outcome lines for ${inputs.length} attempts`);
    lines.forEach((line, i) => {
      const lineBytes = new TextEncoder().encode(line);
      // ADR 0013: a line is {"attempt_id", "attempt_index", "outcome"}.
      const envelope = parseStrict(lineBytes);
      if (toHex(canonical(envelope)) !== toHex(lineBytes)) fail(`${where} line ${i + 1}`, "not canonical JSON");
      if ([...envelope.keys()].sort().join(",") !== "attempt_id,attempt_index,outcome") fail(`${where} line ${i + 1}`, "not an outcome envelope");
      if (Number(get(envelope, "attempt_index")) !== i) fail(`${where} line ${i + 1}`, "attempt_index is not the line's position");
      const outcome = get(envelope, "outcome");
      const kind = outcome.has("replay_result_id") ? "result" : "refusal";
      const [idField, payloadOf] = PAYLOADS[kind];
      if (digest(payloadOf(outcome)) !== get(outcome, idField)) fail(`${where} line ${i + 1}`, `${idField} does not reproduce`);
      const input = inputs[i];
      if (kind === "result") {
        if (get(outcome, "input_digest") !== get(input, "input_digest")) fail(`${where} line ${i + 1}`, "input_digest is not the attempt's");
        if (get(outcome, "run_id") !== get(get(chain, "run"), "run_id")) fail(`${where} line ${i + 1}`, "run_id is not the chain's");
      }
      count("outcome lines");
    });
    // Every binding of the original frame is read at its span, counted in code points.
    const frame = get(chain, "problem_frame");
    for (const b of get(frame, "bindings")) {
      const s = get(b, "span");
      const text = codePointSlice(get(frame, "source_text"), Number(get(s, "start")), Number(get(s, "end")));
      if (text !== get(b, "value").toString()) fail(where, `binding ${get(b, "name")} reads ${JSON.stringify(text)} at its span`);
    }
  }

  for (const f of failures) console.error(`FAIL ${f}`);
  const summary = Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(", ");
  if (failures.length) {
    console.error(`conformance: ${failures.length} failure(s) (${summary})`);
    return 1;
  }
  console.log(`conformance: all vectors reproduce (${summary})`);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
