# Minimal typing stub for pyseccomp 0.1.x (a ctypes binding to libseccomp that
# ships no py.typed marker): only what kernel/external/_seccomp.py and its tests use.
from typing import Protocol

class _HasFileno(Protocol):
    def fileno(self) -> int: ...

KILL_PROCESS: int
KILL_THREAD: int
KILL: int
TRAP: int
LOG: int
ALLOW: int

def ERRNO(x: int) -> int: ...

NE: int
LT: int
LE: int
EQ: int
GE: int
GT: int
MASKED_EQ: int

class Arch:
    NATIVE: int
    X86: int
    X86_64: int
    X32: int
    ARM: int
    AARCH64: int
    S390: int
    S390X: int

class Attr:
    ACT_DEFAULT: int
    ACT_BADARCH: int
    CTL_NNP: int
    CTL_TSYNC: int

class Arg:
    def __init__(self, arg: int, op: int, data_a: int, data_b: int = 0) -> None: ...

class SyscallFilter:
    def __init__(self, defaction: int) -> None: ...
    def set_attr(self, attr: int, value: int) -> None: ...
    def get_attr(self, attr: int) -> int: ...
    def add_arch(self, arch: int) -> None: ...
    def add_rule(self, action: int, syscall: int | str, *args: Arg) -> None: ...
    def export_bpf(self, file: _HasFileno) -> None: ...
    def export_pfc(self, file: _HasFileno) -> None: ...

def system_arch() -> int: ...
def resolve_syscall(arch: int, syscall: str) -> int: ...
