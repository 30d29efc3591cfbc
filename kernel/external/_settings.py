"""The vocabulary of a run: limits, progress stages, roles, the child environment, argv.

Shared by the steps (``_steps.py``), ``run_check`` and ``replay_run``; pure values
and functions, no I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from typing import Final, final

import attrs

from kernel.external._manifest import PLACEHOLDERS

__all__ = [
    "REQUEST_SCHEMA_VERSION",
    "Progress",
    "Role",
    "RunLimits",
    "Stage",
    "default_environment",
    "expand_argv",
]

REQUEST_SCHEMA_VERSION: Final = 1
_PLACEHOLDER: Final = re.compile(r"\{\{([a-z_]+)\}\}")


def _positive_seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive")


def _positive_bytes(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive")


@final
@attrs.frozen
class RunLimits:
    """Deadlines (seconds) and size caps (bytes) for one run or replay."""

    producer_timeout_seconds: float = attrs.field(validator=_positive_seconds)
    checker_timeout_seconds: float = attrs.field(validator=_positive_seconds)
    output_limit_bytes: int = attrs.field(default=1024 * 1024, validator=_positive_bytes)
    receipt_limit_bytes: int = attrs.field(default=1024 * 1024, validator=_positive_bytes)


@final
class Stage(enum.Enum):
    """Progress points reported to the optional ``progress`` callback."""

    IDENTITY_BUILT = "identity_built"
    SNAPSHOT_READY = "snapshot_ready"
    PRODUCER_LAUNCH = "producer_launch"
    PRODUCER_EXITED = "producer_exited"
    CHECKER_LAUNCH = "checker_launch"
    CHECKER_EXITED = "checker_exited"


Progress = Callable[[Stage], None]


@final
class Role(enum.Enum):
    """The two commands of a check; each has its own directory in the attempt."""

    PRODUCER = "producer"
    CHECKER = "checker"


def default_environment() -> dict[str, str]:
    """The minimal child environment the CLI passes (nothing inherited)."""
    return {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }


def expand_argv(argv: tuple[str, ...], values: Mapping[str, str]) -> tuple[str, ...]:
    """Expand ``{{name}}`` inside each element, one pass, never through a shell."""
    if set(values) != set(PLACEHOLDERS):
        raise ValueError("every placeholder needs exactly one value")
    return tuple(_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in argv)
