"""Generate the conformance vectors in vectors/ (ADR 0014).

    .venv/bin/python vectors/generate.py          # rewrite the vector files
    .venv/bin/python vectors/generate.py --check  # exit 1 if any file would change

Every expected value here is computed by the kernel itself (the library for
canonical bytes, parsing and identity payloads; the real ``kernel bundle``
and ``kernel replay`` commands for the replay cases). They are then checked
twice, independently: by ``tests/test_vectors.py`` against the standard
library and ``tests/reference.py``, and by ``vectors/conformance.mjs``, a
Node.js implementation written from the ADRs. A change to canonical bytes,
an identity payload or an outcome line therefore shows up as a diff here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from enum import IntEnum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "vectors"
sys.path.insert(0, str(ROOT))

from kernel.identity import IdentityError, JsonValue, canonical_json, digest  # noqa: E402
from kernel.replay import ReplayBundle  # noqa: E402
from kernel.serde import SerdeError, loads, parse_json  # noqa: E402

KERNEL = Path(sys.executable).with_name("kernel")

# --- values: canonical bytes of accepted documents ------------------------------

# (name, document text). The text is deliberately not canonical (spacing,
# key order, escapes) where the point of the vector is the normalisation.
VALUE_TEXTS: list[tuple[str, str]] = [
    ("null", "null"),
    ("true", "true"),
    ("false", " false "),
    ("zero", "0"),
    ("negative_zero_is_zero", "-0"),
    ("small_ints", "[1, -1, 42]"),
    ("int_2_53_plus_1_exact", str(2**53 + 1)),
    ("int_2_63", str(2**63)),
    ("int_2_64_minus_1", str(2**64 - 1)),
    ("int_2_64_beyond_orjson", str(2**64)),
    ("int_below_minus_2_63", str(-(2**63) - 1)),
    ("int_4300_digits_at_the_limit", "9" * 4300),
    ("negative_int_4300_digits", "-" + "9" * 4300),
    ("empty_string", '""'),
    ("ascii_string", '"abc"'),
    ("escaped_solidus_is_unescaped", '"a\\/b"'),
    ("quote_and_backslash", '"\\"\\\\"'),
    ("short_control_escapes", '"\\b\\f\\n\\r\\t"'),
    ("other_controls_lowercase_u00xx", '"\\u0000\\u0001\\u001f\\u000B"'),
    ("del_and_c1_are_raw", '"\\u007f\\u0080\\u009f"'),
    ("line_and_paragraph_separators_raw", '"\\u2028\\u2029"'),
    ("bom_inside_string_raw", '"\\ufeff"'),
    ("escaped_latin1_becomes_utf8", '"\\u00e9"'),
    ("raw_latin1", '"\u00e9"'),
    ("nfd_is_not_normalised", '"e\u0301"'),
    ("non_bmp_from_escaped_pair", '"\\ud83d\\ude00"'),
    ("non_bmp_raw", '"\U0001f600"'),
    ("empty_containers", '{"a": [], "b": {}}'),
    ("keys_sorted", '{"b": 1, "a": 2, "aa": 3, "A": 4, "": 5}'),
    ("keys_sorted_by_code_point_not_utf16",
     '{"\\ud83d\\ude00": "U+1F600", "\\ue000": "U+E000", "\\uffff": "U+FFFF"}'),
    ("keys_non_ascii_after_ascii", '{"\u00e9": 1, "z": 2, "\u4e2d": 3}'),
    ("key_with_control_escape", '{"a\\nb": 1}'),
    ("nested_mixed", '{"x": [1, {"z": null, "y": [true, false]}], "w": "v"}'),
    ("depth_64_accepted", "[" * 64 + "]" * 64),
]

# --- refused documents: raw bytes and the code the boundary must give ----------

REFUSED_BYTES: list[tuple[str, bytes]] = [
    ("duplicate_key", b'{"a": 1, "a": 2}'),
    ("duplicate_key_nested", b'{"x": {"k": 1, "k": 1}}'),
    ("duplicate_key_after_unescape", b'{"a": 1, "\\u0061": 2}'),
    ("float_fraction", b"1.5"),
    ("float_exponent", b"1e3"),
    ("float_exponent_upper", b"1E3"),
    ("float_integral_value", b"1.0"),
    ("float_negative_zero", b"-0.0"),
    ("float_in_object", b'{"a": 0.5}'),
    ("float_huge_exponent", b"1e400"),
    ("nan", b"NaN"),
    ("infinity", b"Infinity"),
    ("minus_infinity", b"[-Infinity]"),
    ("lone_high_surrogate", b'"\\ud800"'),
    ("lone_low_surrogate", b'"\\udc00"'),
    ("reversed_surrogate_pair", b'"\\ude00\\ud83d"'),
    ("lone_surrogate_in_key", b'{"\\ud800": 1}'),
    ("int_4301_digits", b"1" + b"0" * 4300),
    ("depth_65", b"[" * 65 + b"]" * 65),
    ("invalid_utf8_byte", b'"\xff"'),
    ("overlong_utf8", b'"\xc0\xaf"'),
    ("utf8_encoded_surrogate", b'"\xed\xa0\x80"'),
    ("truncated_utf8", b'"\xe2\x82"'),
    ("empty_document", b""),
    ("trailing_comma", b"[1, 2,]"),
    ("single_quotes", b"{'a': 1}"),
    ("leading_zero", b"01"),
    ("leading_plus", b"+1"),
    ("two_documents", b"1 2"),
    ("unterminated_string", b'"abc'),
    ("raw_newline_in_string", b'"a\nb"'),
    ("raw_tab_in_string", b'"a\tb"'),
    ("bad_escape", b'"\\x41"'),
    ("short_unicode_escape", b'"\\u12"'),
    ("comment", b"[1] // no"),
    ("utf8_bom", b"\xef\xbb\xbf[]"),
    ("bare_word", b"nul"),
    ("non_json_whitespace", b"[1,\x0c2]"),
]

class _Level(IntEnum):
    ONE = 1


# Values that exist only in Python (no JSON text spells them): what
# ``canonical_json`` must refuse. The file names them; tests/test_vectors.py
# builds each from PYTHON_VALUES and checks the code.
PYTHON_VALUES: dict[str, tuple[str, object]] = {
    "non_string_key_int": ("{1: 'a'}", {1: "a"}),
    "non_string_key_none": ("{None: 1}", {None: 1}),
    "float_value": ("1.5", 1.5),
    "float_integral_value": ("1.0", 1.0),
    "float_nan": ("float('nan')", float("nan")),
    "float_infinity": ("float('inf')", float("inf")),
    "lone_surrogate_str": ("'\\ud800'", "\ud800"),
    "lone_surrogate_key": ("{'\\udfff': 1}", {"\udfff": 1}),
    "int_4301_digits": ("10 ** 4300", 10**4300),
    "bytes_value": ("b'a'", b"a"),
    "set_value": ("{1}", {1}),
    "int_enum_member": ("Level.ONE (an IntEnum)", _Level.ONE),
}

# --- spans: code points, not UTF-16 units ---------------------------------------

SPAN_TEXT = "\U0001f34e\U0001f34e Mia had 12 marbles, caf\u00e9 \U0001d7d8 won 7."
SPAN_PREFIX = "\U0001f34e\U0001f34e "  # 3 code points, 5 UTF-16 units, 9 UTF-8 bytes


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def span_vectors() -> list[dict[str, Any]]:
    cases = []
    for needle in ("\U0001f34e", "12", "caf\u00e9", "\U0001d7d8", "7", "."):
        start = SPAN_TEXT.index(needle)
        end = start + len(needle)
        cases.append({
            "text": needle,
            "start": start,
            "end": end,
            "utf16_start": _utf16_units(SPAN_TEXT[:start]),
            "utf16_end": _utf16_units(SPAN_TEXT[:end]),
            "utf8_start": len(SPAN_TEXT[:start].encode()),
            "utf8_end": len(SPAN_TEXT[:end].encode()),
        })
    return [{"source_text": SPAN_TEXT, "code_points": len(SPAN_TEXT),
             "utf16_units": _utf16_units(SPAN_TEXT), "spans": cases}]


# --- records: identity payloads of every record type ------------------------------

Entry = dict[str, Any]


def _record_entry(kind: str, where: str, record: object, stored: str | None,
                  payload: JsonValue, as_json: Callable[[object], JsonValue]) -> Entry:
    recomputed = digest(payload)
    return {
        "kind": kind,
        "where": where,
        "record": as_json(record),
        "stored_id": stored,
        "payload_canonical_hex": canonical_json(payload).hex(),
        "recomputed_id": recomputed,
        "reproduces": stored is None or stored == recomputed,
    }


def bundle_records(source: str, bundle: ReplayBundle) -> Iterator[Entry]:
    from kernel.serde import unstructure

    def entry(kind: str, where: str, record: Any, stored: str | None, payload: JsonValue) -> Entry:
        return _record_entry(kind, f"{source} $.{where}", record, stored, payload, unstructure)

    chain = bundle.chain
    yield entry("problem_frame", "chain.problem_frame", chain.problem_frame, None,
                chain.problem_frame.payload())
    yield entry("assessment", "chain.assessment", chain.assessment,
                chain.assessment.assessment_id, chain.assessment.payload())
    for i, residual in enumerate(chain.residuals):
        yield entry("residual", f"chain.residuals[{i}]", residual, residual.residual_id,
                    residual.payload())
    yield entry("gate", "chain.gate", chain.gate, chain.gate.gate_decision_id, chain.gate.payload())
    yield entry("budget", "chain.budget", chain.budget, chain.budget.budget_id,
                chain.budget.payload())
    run = chain.run
    yield entry("run_input", "chain.run.run_input", run.run_input, run.input_digest,
                run.run_input.payload())
    yield entry("run", "chain.run", run, run.run_id, run.payload())
    for i, attempt in enumerate(run.candidate_attempts):
        yield entry("attempt", f"chain.run.candidate_attempts[{i}]", attempt, attempt.attempt_id,
                    attempt.payload())
    for i, rec in enumerate(chain.reconstructions):
        where = f"chain.reconstructions[{i}]"
        if rec.candidate_problem_frame is not None:
            yield entry("problem_frame", f"{where}.candidate_problem_frame",
                        rec.candidate_problem_frame, rec.candidate_problem_frame_digest,
                        rec.candidate_problem_frame.payload())
        if rec.frame_delta is not None:
            yield entry("frame_delta", f"{where}.frame_delta", rec.frame_delta,
                        rec.frame_delta_digest, rec.frame_delta.payload())
        yield entry("candidate", where, rec, rec.candidate_digest, rec.content_payload())
        yield entry("reconstruction", where, rec, rec.candidate_reconstruction_digest,
                    rec.payload())
    for i, replay_input in enumerate(bundle.inputs):
        yield entry("replay_input", f"inputs[{i}]", replay_input, replay_input.input_digest,
                    replay_input.payload())


def _constant(value: JsonValue) -> Callable[[object], JsonValue]:
    return lambda _record: value


def outcome_records(source: str, lines: list[str]) -> Iterator[Entry]:
    from kernel.replay import ReplayAdapterRefusal, ReplayAdapterResult

    for i, envelope_line in enumerate(lines):
        # ADR 0013: each line wraps the outcome record with its attempt.
        value = json.loads(envelope_line)["outcome"]
        line = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        as_line = _constant(value)
        if "replay_result_id" in value:
            result = loads(line.encode(), ReplayAdapterResult)
            yield _record_entry("result", f"{source} line {i + 1}", result,
                                result.replay_result_id, result.payload(), as_line)
        else:
            refusal = loads(line.encode(), ReplayAdapterRefusal)
            yield _record_entry("refusal", f"{source} line {i + 1}", refusal,
                                refusal.replay_refusal_id, refusal.payload(), as_line)


def verification_and_job_records() -> Iterator[Entry]:
    """Seed 000 request and receipt ids, and seed 003 job digests, from the shipped examples."""
    import attrs

    from kernel.external import Job
    from kernel.serde import unstructure
    from kernel.verification import VerificationPlan, VerificationReceipt
    from kernel.verification._records import receipt_payload, request_payload

    plan = loads((ROOT / "examples/verify/plan.json").read_bytes(), VerificationPlan)
    yield _record_entry("verification_request", "examples/verify/plan.json $.request",
                        plan.request, plan.request.request_id, request_payload(plan.request),
                        unstructure)
    for name in ("receipt.json", "receipt-derived.json"):
        receipt = loads((ROOT / "examples/verify" / name).read_bytes(), VerificationReceipt)
        yield _record_entry("verification_receipt", f"examples/verify/{name}", receipt,
                            receipt.receipt_id, receipt_payload(receipt), unstructure)
    for path in sorted((ROOT / "examples/external/jobs").glob("*.json")):
        job = loads(path.read_bytes(), Job)
        # kernel.external.job_digest_of: the job with its own digest blanked.
        payload = unstructure(attrs.evolve(job, job_digest=""))
        yield _record_entry("external_job", str(path.relative_to(ROOT)), job, job.job_digest,
                            payload, unstructure)


# --- replay cases: real commands, bundle in, outcome lines out ------------------------


def _shift_spans(value: Any, offset: int, prefix: str) -> Any:
    if isinstance(value, dict):
        if set(value) == {"start", "end"}:
            return {"start": value["start"] + offset, "end": value["end"] + offset}
        return {
            key: (prefix + item if key == "source_text" else _shift_spans(item, offset, prefix))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_shift_spans(item, offset, prefix) for item in value]
    return value


def non_bmp_draft() -> bytes:
    """The shipped marbles draft behind a non-BMP prefix, every span shifted by 3 code points."""
    draft = json.loads((ROOT / "examples/drafts/marbles.json").read_bytes())
    shifted = _shift_spans(draft, len(SPAN_PREFIX), SPAN_PREFIX)
    return (json.dumps(shifted, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _run(*args: str) -> bytes:
    result = subprocess.run([str(KERNEL), *args], capture_output=True, check=False)
    # 0 intact, 1 a --fail-on verdict, 3 integrity (the shipped example carries
    # one forged reconstruction on purpose): all three write every outcome line.
    if result.returncode not in (0, 1, 3):
        sys.exit(f"kernel {' '.join(args)} failed ({result.returncode}): {result.stderr.decode()}")
    return result.stdout


def replay_case(name: str, bundle_rel: str, bundle_path: Path) -> Entry:
    stdout = _run("replay", str(bundle_path), "--format", "jsonl", "--quiet")
    return {
        "name": name,
        "bundle": bundle_rel,
        "bundle_sha256": hashlib.sha256(bundle_path.read_bytes()).hexdigest(),
        "manifest": "builtin.v1",
        "command": ["kernel", "replay", bundle_rel, "--format", "jsonl"],
        "outcome_lines": stdout.decode("utf-8").splitlines(),
    }


# --- writing ---------------------------------------------------------------------


def render(value: Any) -> bytes:
    # ASCII-only files: every code point is an escape a reader must decode,
    # and no editor or terminal can alter the bytes.
    return (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def value_vectors() -> list[Entry]:
    out = []
    for name, text in VALUE_TEXTS:
        data = text.encode("utf-8")
        value = parse_json(data)
        canonical = canonical_json(value)
        out.append({
            "name": name,
            "input_hex": data.hex(),
            "canonical_hex": canonical.hex(),
            "sha256": hashlib.sha256(canonical).hexdigest(),
        })
    return out


def refused_vectors() -> list[Entry]:
    out = []
    for name, data in REFUSED_BYTES:
        try:
            parse_json(data)
        except SerdeError as exc:
            out.append({"name": name, "input_hex": data.hex(), "code": exc.code})
        else:
            sys.exit(f"vector {name!r} was accepted by parse_json; it must be refused")
    return out


def python_value_vectors() -> list[Entry]:
    out = []
    for name, (spelling, value) in PYTHON_VALUES.items():
        try:
            canonical_json(value)  # type: ignore[arg-type]  # refused values on purpose
        except IdentityError as exc:
            out.append({"name": name, "python": spelling, "code": exc.code})
        else:
            sys.exit(f"python value {name!r} was accepted by canonical_json; it must be refused")
    return out


def build(tmp: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    files["values.json"] = render({
        "description": "Accepted documents: input bytes, canonical bytes, SHA-256 (ADR 0001).",
        "vectors": value_vectors(),
    })
    files["refused.json"] = render({
        "description": "Documents the strict parser refuses, with the stable code (kernel.serde).",
        "vectors": refused_vectors(),
        "python_values": python_value_vectors(),
    })
    files["spans.json"] = render({
        "description": "Span offsets count Unicode code points; UTF-16 and UTF-8 offsets differ.",
        "vectors": span_vectors(),
    })
    draft = non_bmp_draft()
    files["drafts/non-bmp-marbles.json"] = draft
    (tmp / "draft.json").write_bytes(draft)
    _run("bundle", str(tmp / "draft.json"), "--out", str(tmp / "bundle.json"))
    bundle_bytes = (tmp / "bundle.json").read_bytes()
    files["bundles/non-bmp-marbles.json"] = bundle_bytes
    cases = [
        replay_case("shipped_replay_example", "examples/replay/bundle.json",
                    ROOT / "examples/replay/bundle.json"),
        replay_case("non_bmp_source_text", "vectors/bundles/non-bmp-marbles.json",
                    tmp / "bundle.json"),
    ]
    files["replay.json"] = render({
        "description": "Full replay cases: the outcome lines of `kernel replay BUNDLE` "
                       "(built-in manifest).",
        "cases": cases,
    })
    records: list[Entry] = []
    for case in cases:
        is_vector = case["bundle"].startswith("vectors/")
        data = bundle_bytes if is_vector else (ROOT / case["bundle"]).read_bytes()
        records += bundle_records(case["bundle"], loads(data, ReplayBundle))
        records += outcome_records(f"replay.json {case['name']}", case["outcome_lines"])
    records += verification_and_job_records()
    files["records.json"] = render({
        "description": "Identity payloads (id blanked, explanation excluded) and ids of every "
                       "record type, from the shipped bundles and their outcome lines.",
        "vectors": records,
    })
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if any file would change")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = build(Path(tmp))
    stale = [name for name, data in files.items()
             if not (VECTORS / name).exists() or (VECTORS / name).read_bytes() != data]
    if args.check:
        for name in stale:
            print(f"stale: vectors/{name} (run: .venv/bin/python vectors/generate.py)")
        return 1 if stale else 0
    for name in stale:
        (VECTORS / name).parent.mkdir(parents=True, exist_ok=True)
        (VECTORS / name).write_bytes(files[name])
        print(f"wrote vectors/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
