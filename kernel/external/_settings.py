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
    "DEFAULT_ARTIFACT_LIMIT_BYTES",
    "DEFAULT_EVIDENCE_LIMIT_BYTES",
    "MAX_DEADLINE_SECONDS",
    "REQUEST_SCHEMA_VERSION",
    "Progress",
    "Role",
    "RunLimits",
    "Stage",
    "default_environment",
    "expand_argv",
]

REQUEST_SCHEMA_VERSION: Final = 1
DEFAULT_ARTIFACT_LIMIT_BYTES: Final = 256 * 1024 * 1024
DEFAULT_EVIDENCE_LIMIT_BYTES: Final = 1024 * 1024 * 1024
_PLACEHOLDER: Final = re.compile(r"\{\{([a-z_]+)\}\}")


#: The longest deadline a step may have: 7 days. Beyond it the clocks the wait
#: uses overflow (``--deadline inf`` or ``1e9`` failed every certification
#: with an OverflowError, issue 35 finding 4); a step that needs longer is not
#: one a verification kernel should wait on.
MAX_DEADLINE_SECONDS: Final = 7 * 24 * 3600


def _positive_seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 < value <= MAX_DEADLINE_SECONDS:
        raise ValueError(f"{attribute.name} must be positive and at most "
                         f"{MAX_DEADLINE_SECONDS} seconds (7 days), got {value}")


def _positive_bytes(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive")


def _byte_count(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    # An integer, never a bool or a float: a limit read from JSON is used as written.
    if type(value) is not int or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@final
@attrs.frozen
class RunLimits:
    """Deadlines (seconds) and size caps (bytes) for one run or replay.

    ``artifact_limit_bytes`` bounds each declared artifact and
    ``evidence_limit_bytes`` all of them together, each counted as the larger
    of the apparent size (``st_size``) and the allocated size
    (``st_blocks * 512``), and checked before any artifact is hashed: a 1 TB
    sparse file is refused by its ``lstat``, never read (issue 18, finding 5).
    """

    producer_timeout_seconds: float = attrs.field(validator=_positive_seconds)
    checker_timeout_seconds: float = attrs.field(validator=_positive_seconds)
    output_limit_bytes: int = attrs.field(default=1024 * 1024, validator=_positive_bytes)
    receipt_limit_bytes: int = attrs.field(default=1024 * 1024, validator=_positive_bytes)
    artifact_limit_bytes: int = attrs.field(
        default=DEFAULT_ARTIFACT_LIMIT_BYTES, validator=_byte_count
    )
    evidence_limit_bytes: int = attrs.field(
        default=DEFAULT_EVIDENCE_LIMIT_BYTES, validator=_byte_count
    )


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
