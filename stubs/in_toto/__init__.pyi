# Minimal typing stubs for the part of the in-toto library the tests use
# (in-toto ships no py.typed marker).
