"""Side-by-side benchmarks for replay-kernel (``python -m bench``, ``make bench``).

Machines are shared and noisy, so nothing here reports an absolute time as a
result: each comparison runs its variants interleaved (A, B, B, A, ...) over
many rounds and reports the median per-round ratio with its spread. Results
and the command that produced them live in ``BENCHMARKS.md``. No unit test
asserts speed.
"""
