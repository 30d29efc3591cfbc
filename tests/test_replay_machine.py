"""The machine's shape: total reason->disposition map, one driver, short modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernel.organs import BUILTIN_MANIFEST
from kernel.replay import (
    DISPOSITION_OF,
    ContractClosed,
    ReasonCode,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayDisposition,
    begin_attempt,
    finish_attempt,
    replay_attempt,
)
from kernel.replay._records import REFUSAL_DISPOSITIONS
from kernel.serde import dumps
from tests.replay_fixtures import CallLog, candidate, request_for, toy_chain, toy_manifest

KERNEL = Path(__file__).resolve().parents[1] / "kernel"
D = ReplayDisposition


def test_every_reason_code_has_exactly_one_disposition() -> None:
    assert set(DISPOSITION_OF) == set(ReasonCode)
    assert all(type(value) is ReplayDisposition for value in DISPOSITION_OF.values())
    with pytest.raises(TypeError):
        DISPOSITION_OF[ReasonCode.RUN_ID_MISMATCH] = D.INVALID_REPLAY_INPUT  # type: ignore[index]  # read-only on purpose


def test_only_the_none_applicable_cause_maps_to_a_result_disposition() -> None:
    semantic = {code for code, d in DISPOSITION_OF.items() if d not in REFUSAL_DISPOSITIONS}
    assert semantic == {ReasonCode.NO_PROOF_OBLIGATION_APPLICABLE}
    # Every refusal disposition is reachable from some code (none is dead vocabulary).
    assert {d for d in DISPOSITION_OF.values() if d in REFUSAL_DISPOSITIONS} == set(
        REFUSAL_DISPOSITIONS
    )


@pytest.mark.parametrize("units", [("apples",), ("apples", "pears")])
def test_the_half_steps_are_replay_attempt(units: tuple[str, ...]) -> None:
    manifest = toy_manifest(CallLog())
    request = request_for(toy_chain(candidate(*units)), manifest)
    begun = begin_attempt(request, manifest)
    whole = replay_attempt(request, toy_manifest(CallLog()))
    match begun:
        case ContractClosed():
            assert dumps(finish_attempt(begun)) == dumps(whole)
        case ReplayAdapterResult() | ReplayAdapterRefusal():
            assert dumps(begun) == dumps(whole)


def test_begin_attempt_refuses_a_non_request_without_raising() -> None:
    begun = begin_attempt("not a request", BUILTIN_MANIFEST)
    assert isinstance(begun, ReplayAdapterRefusal)
    assert begun.replay_disposition is D.INVALID_REPLAY_INPUT


def test_no_kernel_module_exceeds_700_lines() -> None:
    long = {
        str(path.relative_to(KERNEL)): n
        for path in KERNEL.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 700
    }
    assert long == {}


def test_the_orchestrator_drives_through_the_machines_half_steps() -> None:
    # One driver: the orchestrator never re-sequences the transitions itself.
    source = (KERNEL / "orchestrate" / "_driver.py").read_text(encoding="utf-8")
    called = {
        node.func.id
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert {"begin_attempt", "finish_attempt"} <= called
    assert not called & {"validate", "replay_contract", "replay_proofs", "dispose"}


def _ends_in_assert_never(node: ast.Match) -> bool:
    last = node.cases[-1]
    return (
        isinstance(last.pattern, ast.MatchAs)
        and last.pattern.pattern is None
        and last.pattern.name is None
        and len(last.body) == 1
        and isinstance(last.body[0], ast.Expr)
        and isinstance(call := last.body[0].value, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "assert_never"
    )


def _over_a_closed_vocabulary(node: ast.Match) -> bool:
    """A case is an enum member (``Enum.X``) or a class: a dispatch that must be total."""

    def tops(pattern: ast.pattern) -> list[ast.pattern]:
        return [p for alt in pattern.patterns for p in tops(alt)] if isinstance(
            pattern, ast.MatchOr) else [pattern]

    return any(
        (isinstance(p, ast.MatchValue) and isinstance(p.value, ast.Attribute))
        or isinstance(p, ast.MatchClass)
        for case in node.cases
        for p in tops(case.pattern)
    )


def test_every_match_in_the_kernel_ends_in_assert_never() -> None:
    # mypy's exhaustive-match proves totality only where the match is closed
    # off; ``case _: assert_never(x)`` makes a new enum member or union arm a
    # type error at every consumer (ADR 0011). A match over plain constants or
    # shapes (command words, say) may end in an ordinary default instead.
    open_ended = [
        f"{path.relative_to(KERNEL)}:{node.lineno}"
        for path in sorted(KERNEL.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Match)
        and _over_a_closed_vocabulary(node)
        and not _ends_in_assert_never(node)
    ]
    assert open_ended == []
