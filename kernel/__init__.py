"""replay-kernel: fail-closed candidate replay and verification (ADR-0229).

The pure core (``identity``, ``serde``, ``frames``, ``upstream``, ``replay``,
``verification``, ``organs``) never touches files, processes, clocks,
randomness or the environment; ``external``, ``commands`` and ``cli`` are the
impure shell that calls it.
"""

__version__ = "0.1.0"
