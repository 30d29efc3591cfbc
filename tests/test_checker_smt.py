"""The shipped SMT checkers against adversarial specifications (issue 13).

``examples/backends/smt_checker.py`` (the example format) and
``kernel/programs/smt_certify_checker.py`` (the certification
problem) must decide from the query they pose themselves: every route that
used to turn a false claim into ``accepted`` (commands after ``exit``, an
answer printed by ``get-option``, an inconsistent prelude, a recursive
definition, an output channel onto a file, zero obligations) and the cases
around them give ``unknown`` or ``rejected``, never ``accepted``; honest claims
still pass. Most cases call the scripts' decision functions in-process (fresh
cvc5 objects each time); the receipt paths run the scripts as processes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings

from kernel.organs.certification import certification_problem
from tests.test_organ_certification import numbers, runnable_frames, story

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_SCRIPT = ROOT / "examples" / "backends" / "smt_checker.py"
CERTIFY_SCRIPT = ROOT / "kernel" / "programs" / "smt_certify_checker.py"
SPECS = ROOT / "examples" / "external" / "specs"
ABS = (SPECS / "abs.smt2").read_text()
ABS_FALSE = (SPECS / "abs_false.smt2").read_text()


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _load(EXAMPLE_SCRIPT, "shipped_smt_checker")
CERTIFY = _load(CERTIFY_SCRIPT, "shipped_smt_certify_checker")


def example(text: str | bytes, names: list[str]) -> dict[str, tuple[str, str]]:
    data = text.encode() if isinstance(text, str) else text
    found = EXAMPLE.answers(data, names)
    assert isinstance(found, dict)
    return found


def certify(text: str | bytes) -> tuple[str, str]:
    data = text.encode() if isinstance(text, str) else text
    answer, reason = CERTIFY.answer(data)
    assert isinstance(answer, str) and isinstance(reason, str)
    return answer, reason


def story_problem() -> str:
    text = certification_problem(story())
    assert text is not None
    return text


# --- honest claims pass ------------------------------------------------------------------


def test_the_shipped_example_specifications_decide_as_before() -> None:
    assert {k: v[0] for k, v in example(ABS, ["abs_nonnegative", "abs_triangle"]).items()} == {
        "abs_nonnegative": "unsat",
        "abs_triangle": "unsat",
    }
    assert example(ABS_FALSE, ["abs_below_100"])["abs_below_100"][0] == "sat"


def test_comments_may_hold_any_utf8_text() -> None:
    text = "; évaluer |x| ≥ 0 (assert false) (exit)\n" + ABS
    assert example(text, ["abs_nonnegative"])["abs_nonnegative"][0] == "unsat"


def test_every_declaration_form_of_the_grammar_is_run() -> None:
    text = (
        "(set-logic QF_UF)\n(declare-sort S 0)\n(define-sort T () S)\n(declare-const a T)\n"
        "(declare-fun f (S) S)\n(define-fun same () Bool (= (f a) (f a)))\n"
        "(define-fun fixed () Bool (= (f a) a))\n"
    )
    found = example(text, ["same", "fixed"])
    assert (found["same"][0], found["fixed"][0]) == ("unsat", "sat")


def test_certification_problems_of_the_kernel_are_accepted() -> None:
    for frame in (story(), numbers()):
        text = certification_problem(frame)
        assert text is not None
        assert certify(text) == ("unsat", "targets cannot differ")


@settings(max_examples=500 if os.environ.get("HYPOTHESIS_PROFILE") == "deep" else 20)
@given(runnable_frames())
def test_every_runnable_frame_s_problem_is_in_the_certify_grammar(frame: object) -> None:
    from kernel.frames import ProblemFrame

    assert isinstance(frame, ProblemFrame)
    text = certification_problem(frame)
    assert text is not None
    assert certify(text)[0] == "unsat"


# --- the example format: the routes of issue 13 -------------------------------------------


EXIT_ROUTE = "(push 1)(assert false)(check-sat)(pop 1)(exit)(assert false)\n"


@pytest.mark.parametrize(
    "suffix",
    [
        EXIT_ROUTE,  # cvc5's command loop goes on after (exit)
        "(set-option :filename unsat)\n(get-option :filename)\n",  # an answer printed on demand
        "(assert false)\n",  # an inconsistent prelude
        "(define-fun-rec loop ((v Int)) Int (+ (loop v) 1))\n",  # no model, solvers disagree
        '(set-option :regular-output-channel "/tmp/issue13-canary")\n',  # writes a file
        "(check-sat)\n",
        "(exit)\n",
        "(reset)\n",
        "(push 1)\n",
        "(get-model)\n",
        '(include "other.smt2")\n',
        "(set-info :status unsat)\n",
        "(set-logic QF_LIA)\n",  # a second set-logic
        "(declare-datatype D ((d)))\n",
    ],
)
def test_no_command_outside_the_example_grammar_is_run(suffix: str) -> None:
    (name,) = ["abs_below_100"]
    answer, reason = example(ABS_FALSE + suffix, [name])[name]
    assert answer == "unknown", reason


def test_an_output_channel_never_touches_the_file(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("kept")
    text = ABS + f'(set-option :regular-output-channel "{canary}")\n'
    assert example(text, ["abs_triangle"])["abs_triangle"][0] == "unknown"
    assert canary.read_text() == "kept"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("(set-logic QF_XYZ)\n(define-fun c () Bool true)\n", ["c"]),
        ("(declare-const x Int)\n(set-logic QF_LIA)\n(define-fun c () Bool true)\n", ["c"]),
        ("(set-logic QF_LIA)\n(declare-const |x| Int)\n(define-fun c () Bool true)\n", ["c"]),
        ('(set-logic QF_LIA)\n(define-fun c () Bool (= "a" "a"))\n', ["c"]),
        ("(set-logic QF_LIA)\n(define-fun c () Bool (! true :named t))\n", ["c"]),
        ("(set-logic QF_LIA)\n(define-fun c () Bool (= 12abc 1))\n", ["c"]),
        ("(set-logic QF_LIA)\n(define-fun c () Bool true\n", ["c"]),
        ("(set-logic QF_LIA)\n(define-fun c () Bool true))\n", ["c"]),
        ("(set-logic QF_LIA)\ntrue\n", ["true"]),
        ("(set-logic QF_LIA)\n(declare-const x Int)\n", ["true"]),  # a built-in, not defined
        ("(set-logic QF_LIA)\n(define-fun c ((v Int)) Bool true)\n", ["c"]),
        ("(set-logic QF_LIA)\n(define-fun c () Int 0)\n", ["c"]),
        ("(set-logic QF_LIA)\n(define-sort Bool () Int)\n(define-fun c () Bool 1)\n", ["c"]),
        ("(set-logic QF_LIA)\n(define-fun c () Bool true)\n", ["../c"]),
        ("(set-logic QF_LIA)\n(define-fun c () Bool true)\n(define-fun c () Bool true)\n", ["c"]),
    ],
)
def test_specifications_outside_the_grammar_are_unknown(text: str, names: list[str]) -> None:
    for answer, reason in example(text, names).values():
        assert answer == "unknown", reason


def test_division_by_zero_is_unspecified_so_the_claim_fails() -> None:
    text = "(set-logic QF_NIA)\n(declare-const x Int)\n(define-fun c () Bool (= (div x 0) 0))\n"
    assert example(text, ["c"])["c"][0] == "sat"
    same = text.replace("(= (div x 0) 0)", "(= (div x 0) (div x 0))")
    assert example(same, ["c"])["c"][0] == "unsat"


def test_int_and_real_are_never_mixed_silently() -> None:
    text = "(set-logic QF_LIA)\n(declare-const x Int)\n(define-fun c () Bool (> (+ x 1.5) x))\n"
    answer, reason = example(text, ["c"])["c"]
    assert answer == "unknown" and "strict" in reason
    real = "(set-logic QF_LIRA)\n(declare-const x Int)\n"
    real += "(define-fun c () Bool (> (+ (to_real x) 1.5) (to_real x)))\n"
    assert example(real, ["c"])["c"][0] == "unsat"


def test_an_unknown_answer_is_unknown() -> None:
    text = (
        "(set-logic UFLIA)\n(declare-fun f (Int) Int)\n"
        "(define-fun c () Bool (exists ((y Int)) (forall ((z Int)) (> (f z) (+ (f y) z)))))\n"
    )
    answer, reason = example(text, ["c"])["c"]
    assert answer == "unknown" and "INCOMPLETE" in reason


def test_invalid_utf8_and_oversized_specifications_are_unknown() -> None:
    assert example(b"\xff\xfe(set-logic QF_LIA)", ["c"])["c"][0] == "unknown"
    huge = "(set-logic QF_LIA)\n" + " " * (2 << 20) + "(define-fun c () Bool true)\n"
    assert example(huge, ["c"])["c"][0] == "unknown"
    assert certify(b"(set-logic QF_NIA)\n\xc3(check-sat)\n")[0] == "unknown"


def test_deep_nesting_is_refused_before_cvc5_reads_it() -> None:
    deep = "(not " * 20_000 + "true" + ")" * 20_000
    answer, reason = example(f"(set-logic QF_LIA)\n(define-fun c () Bool {deep})\n", ["c"])["c"]
    assert answer == "unknown" and "nesting" in reason
    shallow = "(not " * 40 + "true" + ")" * 40
    assert example(f"(define-fun c () Bool {shallow})\n", ["c"])["c"][0] == "unsat"
    assert "nesting" in certify(story_problem().replace("(check-sat)", deep + "(check-sat)"))[1]


def test_zero_obligations_decide_nothing() -> None:
    assert example(ABS, []) == {}


# --- the certify format ---------------------------------------------------------------------


def _before_check_sat(extra: str) -> str:
    text = story_problem()
    return text.replace("(check-sat)\n", extra + "(check-sat)\n")


@pytest.mark.parametrize(
    "text",
    [
        story_problem() + "(exit)\n(assert false)\n",  # after check-sat
        story_problem() + "(check-sat)\n",
        story_problem().replace("(check-sat)\n", ""),
        _before_check_sat("(set-option :filename unsat)\n(get-option :filename)\n"),
        _before_check_sat("(push 1)\n"),
        _before_check_sat("(assert false)\n"),  # the last assertion is not 'targets differ'
        _before_check_sat("(assert (distinct q0_1 q0_1))\n"),
        _before_check_sat("(define-fun f () Int 0)\n"),
        story_problem().replace("(set-logic QF_NIA)", "(set-logic QF_LIA)"),
        story_problem().replace("(set-logic QF_NIA)\n", ""),
        story_problem().replace("(declare-const q0_1 Int)", "(declare-const q0_1 Real)"),
        story_problem().replace("(declare-const q0_1 Int)", "(declare-const x Int)"),
        "(set-logic QF_NIA)\n(check-sat)\n",
    ],
)
def test_certify_problems_outside_the_grammar_are_unknown(text: str) -> None:
    answer, reason = certify(text)
    assert answer == "unknown", reason


def test_an_inconsistent_base_never_certifies_vacuously() -> None:
    text = story_problem()
    lines = text.splitlines(keepends=True)
    differ = lines.index(next(line for line in lines if line.startswith("(assert (distinct")))
    lines.insert(differ, "(assert (= q0_1 (+ q0_1 1)))\n")
    answer, reason = certify("".join(lines))
    assert answer == "unknown" and "not satisfiable" in reason


def test_a_comment_cannot_change_the_term_cvc5_reads() -> None:
    # A slice of the source text would hand cvc5 "false" here; the checker
    # renders the checked tree instead, so cvc5 reads the real assertion.
    text = story_problem()
    differ = next(line for line in text.splitlines() if line.startswith("(assert (distinct"))
    hidden = "(; assert false\n" + differ[1:]
    answer, _ = certify(text.replace(differ, hidden))
    assert answer == "unsat"  # the same problem, decided on its real terms
    underdetermined = text.replace("(assert (= q1_1 5))\n", "").replace("(assert (= q1_2 5))\n", "")
    assert certify(underdetermined)[0] == "sat"
    assert certify(underdetermined.replace(differ, hidden))[0] == "sat"


# --- the receipt, from the scripts run as processes -----------------------------------------


def _run(
    tmp_path: Path,
    script: Path,
    specification: bytes,
    names: list[str],
    evidence: dict[str, bytes],
) -> dict[str, object]:
    snapshot, out = tmp_path / "snapshot", tmp_path / "evidence"
    snapshot.mkdir(parents=True)
    out.mkdir()
    (snapshot / "spec.smt2").write_bytes(specification)
    for name, data in evidence.items():
        (out / name).write_bytes(data)
    request = {
        "job_id": "job",
        "run_id": "run",
        "check_id": "check",
        "check_digest": "c" * 64,
        "specification_digest": hashlib.sha256(specification).hexdigest(),
        "identity": "i" * 64,
        "evidence_digest": "e" * 64,
        "claim": {"specification": "spec.smt2", "obligations": names},
        "paths": {"snapshot": str(snapshot), "evidence": str(out)},
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    receipt = tmp_path / "receipt.json"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "request.json"), str(receipt)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(receipt.read_text())
    assert isinstance(loaded, dict)
    for key in ("job_id", "run_id", "check_id", "check_digest", "specification_digest"):
        assert loaded[key] == request[key]
    return loaded


def _example_evidence(text: str, answers: dict[str, str]) -> dict[str, bytes]:
    files = {
        f"{name}.smt2": f"{text.rstrip()}\n(assert (not {name}))\n(check-sat)\n".encode()
        for name in answers
    }
    files["z3-answers.txt"] = "".join(f"{n} {a}\n" for n, a in answers.items()).encode()
    return files


def test_example_receipts_accept_honest_and_refuse_the_exit_route(tmp_path: Path) -> None:
    names = {"abs_nonnegative": "unsat", "abs_triangle": "unsat"}
    honest = _run(
        tmp_path / "a", EXAMPLE_SCRIPT, ABS.encode(), list(names), _example_evidence(ABS, names)
    )
    assert honest["verdict"] == "accepted"
    attack = ABS_FALSE + EXIT_ROUTE
    forged = {"abs_below_100": "unsat"}  # z3 stops at (exit): it says unsat too
    receipt = _run(
        tmp_path / "b",
        EXAMPLE_SCRIPT,
        attack.encode(),
        list(forged),
        _example_evidence(attack, forged),
    )
    assert receipt["verdict"] == "unknown"


def test_example_receipts_for_zero_obligations_and_z3_disagreement(tmp_path: Path) -> None:
    empty = _run(tmp_path / "a", EXAMPLE_SCRIPT, ABS.encode(), [], {"z3-answers.txt": b""})
    assert (empty["verdict"], empty["obligations"]) == ("unknown", [])
    names = {"abs_triangle": "sat"}
    disagree = _run(
        tmp_path / "b", EXAMPLE_SCRIPT, ABS.encode(), list(names), _example_evidence(ABS, names)
    )
    assert disagree["verdict"] == "unknown"


def test_certify_receipts_accept_the_problem_and_write_no_file(tmp_path: Path) -> None:
    text = story_problem().encode()
    evidence = {"target_certified.smt2": text, "z3-answer.txt": b"target_certified unsat\n"}
    receipt = _run(tmp_path / "a", CERTIFY_SCRIPT, text, ["target_certified"], evidence)
    assert receipt["verdict"] == "accepted"
    canary = tmp_path / "canary"
    attack = _before_check_sat(f'(set-option :regular-output-channel "{canary}")\n').encode()
    evidence = {"target_certified.smt2": attack, "z3-answer.txt": b"target_certified unsat\n"}
    receipt = _run(tmp_path / "b", CERTIFY_SCRIPT, attack, ["target_certified"], evidence)
    assert receipt["verdict"] == "unknown" and not canary.exists()
    empty = _run(tmp_path / "c", CERTIFY_SCRIPT, text, [], {"z3-answer.txt": b""})
    assert empty["verdict"] == "unknown"
