"""replay-kernel: fail-closed candidate replay and verification (ADR-0229).

The pure core (``identity``, ``serde``, ``frames``, ``upstream``, ``replay``,
``verification``, ``organs``) never touches files, processes, clocks,
randomness or the environment; ``external``, ``commands`` and ``cli`` are the
impure shell that calls it.

Public modules of this package, each with an exact ``__all__``: ``identity``,
``serde``, ``frames``, ``upstream``, ``drafts``, ``schemas``, ``replay``,
``verification``, ``organs``, ``external`` and ``orchestrate``. The package
itself re-exports nothing, so ``import kernel`` stays cheap; the distribution
is ``failclosed-replay`` (ADR 0014).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
