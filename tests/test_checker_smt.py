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
from hypothesis import event, given, settings
from hypothesis import strategies as st

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


# --- issue 19: a command cvc5 refuses while running it ------------------------------------
#
# cvc5's ``Command.invoke`` does not raise when it refuses a command: it returns
# the text ``(error "...")`` and goes on. Each route below made a command fail
# that way, and the checker (which discarded that text) accepted ``c``; the
# lying producer of ``tests/test_external_backends.py`` turned each into a PASS.

_HEAD = "(set-logic QF_UFLIA)\n(declare-const x Int)\n"
SILENT_FAILURE_ROUTES = {
    # The example: the first definition of g fails, the second decides;
    # under SMT-LIB the redefinition is the error and c means x > 0.
    "duplicate_formal_parameter": _HEAD + "(define-fun g ((y Int) (y Int)) Bool (> y 0))\n"
    "(define-fun g ((y Int) (z Int)) Bool true)\n(define-fun c () Bool (g x x))\n",
    # The declaration that should make g uninterpreted fails; cvc5 keeps `true`.
    "re_declared_name": _HEAD + "(define-fun g ((y Int)) Bool true)\n(declare-fun g (Int) Bool)\n"
    "(define-fun c () Bool (g x))\n",
    "second_declare_const": _HEAD + "(define-fun g ((y Int)) Bool true)\n(declare-const g Bool)\n"
    "(define-fun c () Bool (g x))\n",
    "declare_const_false": _HEAD + "(define-fun g ((y Int)) Bool true)\n"
    "(declare-const false Bool)\n(define-fun c () Bool (g x))\n",
    # The obligation's own first definition fails; its redefinition decides.
    "redefinition": _HEAD + "(define-fun c ((y Int) (y Int)) Bool (> x 0))\n"
    "(define-fun c () Bool true)\n",
    # A helper that never existed for cvc5 (z3 reports the error too).
    "silently_failed_helper": _HEAD + "(define-fun pos ((y Int) (y Int)) Bool (> y 0))\n"
    "(define-fun c () Bool (or (> x 0) (<= x 0)))\n",
}


@pytest.mark.parametrize("route", sorted(SILENT_FAILURE_ROUTES))
def test_a_command_cvc5_refuses_is_never_ignored(route: str) -> None:
    answer, reason = example(SILENT_FAILURE_ROUTES[route], ["c"])["c"]
    assert answer == "unknown", reason


@pytest.mark.parametrize("route", sorted(SILENT_FAILURE_ROUTES))
def test_a_lying_producer_gets_no_accepted_receipt_on_a_silent_failure(
    route: str, tmp_path: Path
) -> None:
    text = SILENT_FAILURE_ROUTES[route]
    lie = {"c": "unsat"}
    receipt = _run(tmp_path, EXAMPLE_SCRIPT, text.encode(), ["c"], _example_evidence(text, lie))
    assert receipt["verdict"] == "unknown", receipt


@pytest.mark.parametrize(
    ("binding", "why"),
    [
        ("(declare-const x Bool)\n", "bound again"),
        ("(declare-fun x (Int) Int)\n", "bound again"),
        ("(define-fun x () Int 0)\n", "bound again"),
        ("(declare-fun abs (Int) Int)\n", "not a free NAME"),  # cvc5 shadows it, z3 does not
        ("(define-fun div ((a Int) (b Int)) Int a)\n", "not a free NAME"),
        ("(declare-const true Bool)\n", "not a free NAME"),
        ("(declare-const bvadd Int)\n", "not a free NAME"),
        ("(define-fun f ((abs Int)) Int abs)\n", "not a free NAME"),
        ("(define-sort T (X X) X)\n", "repeats a parameter"),
        ("(declare-sort S 0)\n(define-sort S () Int)\n", "bound again"),
    ],
)
def test_a_name_bound_twice_or_a_theory_symbol_is_refused_before_solving(
    binding: str, why: str
) -> None:
    text = _HEAD + binding + "(define-fun c () Bool true)\n"
    answer, reason = example(text, ["c"])["c"]
    assert answer == "unknown" and why in reason, reason


def test_a_sort_and_a_function_may_share_a_name() -> None:
    text = "(set-logic QF_UF)\n(declare-sort x 0)\n(declare-const x x)\n"
    text += "(define-fun c () Bool (= x x))\n"
    assert example(text, ["c"])["c"][0] == "unsat"


def test_every_command_the_example_checker_runs_must_give_no_output() -> None:
    # A failure the grammar cannot see is still caught where cvc5 runs it.
    _, session, symbols = EXAMPLE.solver()
    EXAMPLE.run_command(session, symbols, "set-logic", "(set-logic QF_LIA)")
    EXAMPLE.run_command(session, symbols, "declare-const", "(declare-const x Int)")
    with pytest.raises(EXAMPLE.Refused, match=r"cvc5 refused declare-const: \(error .*x"):
        EXAMPLE.run_command(session, symbols, "declare-const", "(declare-const x Int)")


def test_every_declaration_the_certify_checker_runs_must_give_no_output() -> None:
    session, symbols = CERTIFY.solver()
    CERTIFY._declare(session, symbols, "(set-logic QF_NIA)")
    CERTIFY._declare(session, symbols, "(declare-const q0_1 Int)")
    with pytest.raises(CERTIFY.Refused, match=r"cvc5 refused .*\(error .*q0_1"):
        CERTIFY._declare(session, symbols, "(declare-const q0_1 Int)")


def test_a_certify_quantity_declared_twice_is_refused_before_solving() -> None:
    text = story_problem()
    again = "(declare-const q0_1 Int)\n"
    assert again in text
    answer, reason = certify(text.replace(again, again + again, 1))
    assert answer == "unknown" and "second time" in reason, reason


# --- issue 19: z3 and cvc5 agree on what every accepted specification declares -------------

Z3 = Path(sys.executable).parent / "z3"
# Free names (few enough that some are bound again), and now and then the
# obligation's own name or a symbol of a theory.
_FREE = ("x", "y", "z", "g", "h", "k")
_CLASHING = ("c", "false", "abs", "div", "bvadd")


@st.composite
def _specifications(draw: st.DrawFn) -> str:
    """Random preludes over ``_FREE`` and ``_CLASHING``, typed by the *last* binding of each name
    (so a redeclaration yields terms that mean something else, or nothing,
    to a solver that kept the first), ending with the obligation ``c``."""
    ints: list[str] = []
    bools: list[str] = []
    unary: list[str] = []  # (Int) Bool
    binary: list[str] = []  # (Int Int) Bool

    def forget(name: str) -> None:
        for table in (ints, bools, unary, binary):
            while name in table:
                table.remove(name)

    def integer(scope: list[str]) -> str:
        options = [*ints, *scope, "0", "1", "(- 1)"]
        atom = draw(st.sampled_from(options))
        if draw(st.integers(0, 3)) == 0:
            return f"(+ {atom} {draw(st.sampled_from(options))})"
        return atom

    def boolean(scope: list[str], depth: int = 0) -> str:
        kinds = ["compare", "equal", *(["const"] if bools else [])]
        kinds += [*(["unary"] if unary else []), *(["binary"] if binary else [])]
        kinds += ["not", "and", "or", "excluded_middle"] if depth < 2 else []
        kind = draw(st.sampled_from(kinds))
        if kind == "compare":
            return f"({draw(st.sampled_from(('>', '<=')))} {integer(scope)} 0)"
        if kind == "equal":
            return f"(= {integer(scope)} {integer(scope)})"
        if kind == "const":
            return draw(st.sampled_from(bools))
        if kind == "unary":
            return f"({draw(st.sampled_from(unary))} {integer(scope)})"
        if kind == "binary":
            return f"({draw(st.sampled_from(binary))} {integer(scope)} {integer(scope)})"
        if kind == "excluded_middle":  # valid under any reading that parses it
            inner = boolean(scope, depth + 1)
            return f"(or {inner} (not {inner}))"
        if kind == "not":
            return f"(not {boolean(scope, depth + 1)})"
        return f"({kind} {boolean(scope, depth + 1)} {boolean(scope, depth + 1)})"

    lines = ["(set-logic QF_UFLIA)"]
    for _ in range(draw(st.integers(1, 5))):
        pool = _CLASHING if draw(st.integers(0, 5)) == 0 else _FREE
        name = draw(st.sampled_from(pool))
        form = draw(st.sampled_from(("const-int", "const-bool", "fun", "define", "define2")))
        if form == "const-int":
            lines.append(f"(declare-const {name} Int)")
            forget(name)
            ints.append(name)
        elif form == "const-bool":
            lines.append(f"(declare-const {name} Bool)")
            forget(name)
            bools.append(name)
        elif form == "fun":
            lines.append(f"(declare-fun {name} (Int) Bool)")
            forget(name)
            unary.append(name)
        elif form == "define":
            lines.append(f"(define-fun {name} ((u Int)) Bool {boolean(['u'])})")
            forget(name)
            unary.append(name)
        else:
            first, second = draw(st.sampled_from((("u", "v"), ("u", "u"), ("v", "u"))))
            body = boolean([first, second])
            lines.append(f"(define-fun {name} (({first} Int) ({second} Int)) Bool {body})")
            forget(name)
            binary.append(name)
    lines.append(f"(define-fun c () Bool {boolean([])})")
    return "\n".join(lines) + "\n"


def _z3(text: str) -> str:
    done = subprocess.run(
        [str(Z3), "-smt2", "-in"],
        input=f"{text}(assert (not c))\n(check-sat)\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip()


@settings(max_examples=400 if os.environ.get("HYPOTHESIS_PROFILE") == "deep" else 60, deadline=None)
@given(_specifications())
def test_z3_and_cvc5_agree_on_every_accepted_specification(text: str) -> None:
    answer, reason = example(text, ["c"])["c"]
    event(f"cvc5 checker: {answer}")
    if answer == "unknown":
        return
    # Accepted by the grammar and run by cvc5: z3 must read every declaration
    # without an error and give the same answer (a silently dropped command
    # is exactly where the two part ways).
    assert _z3(text) == answer, (text, reason)
