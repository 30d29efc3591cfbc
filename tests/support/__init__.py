"""The tests' shared toolkit (no tests of its own).

- ``reference``: the one independent reference hasher (stdlib ``json`` +
  ``hashlib`` only) and the documented identities recomputed with it
  (ADR-0229 §17: tests recompute identities independently, never with the
  package's private helpers).
- ``processes``: the one ``/proc`` scanner (what runs, who started it, what
  it names) and the assertions built on it (nothing left behind).
- ``cli``: the real command line run in a fresh interpreter (``kernel``).
- ``fixtures``: pytest fixtures shared by many modules (``no_leftovers``),
  registered for the whole suite by ``tests/conftest.py``.
"""
