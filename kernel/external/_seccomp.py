"""The syscall filter of a sandboxed producer or checker step (issue 34, deliverable 3).

Theory of operation
-------------------
A step runs under bubblewrap in its own user, PID and network namespaces
(``kernel.external._sandbox``). Namespaces bound what the step can *name*;
this filter bounds what it can *ask the kernel to do*. It is compiled by
libseccomp (through the ``pyseccomp`` binding, imported lazily) into the
classic-BPF program ``seccomp_export_bpf`` writes, which bubblewrap reads from
the descriptor given to ``--seccomp FD`` and installs just before it executes
the step. No BPF is assembled here.

The default action is ALLOW, as in Docker's default profile and Flatpak's
``setup_seccomp`` (``common/flatpak-run.c``), on which the deny list is
anchored. Each denied call returns a plain errno, never a signal, so a
well-behaved solver sees an ordinary failure it can report:

* EPERM (Flatpak's and Docker's choice): the kernel keyring (``keyctl``,
  ``add_key``, ``request_key``); new namespaces and mounts (``unshare``,
  ``setns``, ``mount``, ``umount2``, ``pivot_root``, ``chroot``, and ``clone``
  with any CLONE_NEW* flag, one MASKED_EQ rule a flag as Flatpak does);
  ``ptrace`` and ``process_vm_readv``/``writev`` (below); ``perf_event_open``,
  ``bpf``, ``userfaultfd`` (kernel attack surface, Docker); the ``io_uring``
  calls (their operations never pass through this filter, Docker); host
  administration (``kexec_*``, ``*_module``, ``acct``, ``swapon``/``swapoff``,
  ``reboot``, ``syslog``, ``quotactl``, ``vhangup``, ``lookup_dcookie``,
  ``uselib``, ``modify_ldt``); file handles (``name_to_handle_at``,
  ``open_by_handle_at``: they open files by inode, past the mount view);
  ``ioctl`` TIOCSTI and TIOCLINUX (typing into the terminal: CVE-2017-5226,
  CVE-2023-28100); ``personality`` other than PER_LINUX (0) or the query
  0xffffffff (Flatpak allows only PER_LINUX; the query is kept so that
  programs reading their persona still run).
* ENOSYS: ``clone3``, whose flags sit in a struct seccomp cannot read; libc
  then falls back to ``clone``, whose flags are checked (Flatpak, Docker,
  CVE-2021-41133); and the new mount API (``open_tree``, ``move_mount``,
  ``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``, ``mount_setattr``),
  as Flatpak does, so that libmount falls back to ``mount``, denied above.
* EACCES: ``socket(AF_UNIX, ...)``. A connection to a filesystem or abstract
  unix socket (a host daemon, another step's socket) needs such a socket
  first; EACCES is what a client would see for a socket it may not open.
  ``socketpair(AF_UNIX)`` stays allowed: interpreters and solvers use it to
  talk to their own children, and the pair it makes connects to nothing else.
  AF_NETLINK and AF_INET/AF_INET6 stay allowed: the step has its own network
  namespace, which holds only a loopback interface.

``ptrace`` of anything is denied: a step never debugs. Tracing (or reading
and writing another process's memory with ``process_vm_*``) would let one
process of a step rewrite another's memory or results, and ptrace has been
used to rewrite a syscall after the filter saw it (kernels before 4.8).

Arguments the kernel reads as 32-bit (``ioctl``'s request, ``socket``'s
family, ``personality``) are compared on their low 32 bits, so that setting
the high bits of the 64-bit register cannot slip past a rule.

Only the native ABI is in the filter. A syscall from another ABI (the ia32
``int 0x80`` or x32 ABI on x86-64, 32-bit ARM on AArch64) would otherwise run
unfiltered; libseccomp sends every such call to the bad-arch action, set here
to KILL_PROCESS: no well-behaved step uses them, and a killed process is an
unambiguous failure. Syscall names this libseccomp does not know, or that do
not exist on this architecture, are skipped: there is nothing to deny.
"""

from __future__ import annotations

import errno
import functools
import struct
import tempfile
import termios

__all__ = ["SeccompUnavailableError", "step_filter_bpf"]


class SeccompUnavailableError(OSError):
    """The seccomp binding or libseccomp cannot be loaded, or the filter does not compile."""


_EPERM_CALLS = (
    # The kernel keyring: shared state outside every namespace (Flatpak, Docker).
    "keyctl", "add_key", "request_key",
    # New namespaces, mounts and root changes (Flatpak).
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
    # Tracing and cross-process memory access (see the module docstring).
    "ptrace", "process_vm_readv", "process_vm_writev",
    # Kernel attack surface a step does not need (Docker, Flatpak).
    "perf_event_open", "bpf", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # Host administration (Docker; most also need capabilities the step lacks).
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "vhangup",
    "lookup_dcookie", "uselib", "modify_ldt",
    # Opening files by handle goes past the mount view (Docker).
    "name_to_handle_at", "open_by_handle_at",
)

_ENOSYS_CALLS = (
    "clone3",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
)

# CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
# CLONE_NEWPID, CLONE_NEWNET (<linux/sched.h>). CLONE_NEWTIME (0x80) is not
# accepted by clone(), where that bit belongs to the exit signal.
_CLONE_NEW_FLAGS = (
    0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
)

# TIOCLINUX is 0x541C wherever TIOCSTI is 0x5412 (asm-generic/ioctls.h).
_TTY_IOCTLS = (termios.TIOCSTI, getattr(termios, "TIOCLINUX", termios.TIOCSTI + 0x0A))

_AF_UNIX = 1
_LOW32 = 0xFFFFFFFF


def _check_binding() -> None:
    """Import pyseccomp once; SeccompUnavailableError if it or libseccomp cannot load."""
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError, RuntimeError, AttributeError) as exc:
        # pyseccomp raises RuntimeError when libseccomp is not found, OSError
        # when it cannot be loaded, AttributeError when it lacks a symbol.
        raise SeccompUnavailableError(
            errno.ENOSYS, f"libseccomp binding unavailable: {exc}"
        ) from exc


def _compile() -> bytes:
    """Build the step filter with libseccomp and export it as classic BPF."""
    import pyseccomp as sc  # already imported by _check_binding

    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)

    def deny(name: str, eno: int, *args: sc.Arg) -> None:
        """Add one deny rule; skip a call unknown to libseccomp or absent on this arch."""
        # resolve_syscall returns -1 for a name libseccomp does not know and a
        # negative pseudo-number for a call that does not exist on this arch.
        number = sc.resolve_syscall(sc.Arch.NATIVE, name)
        if number < 0:
            return
        f.add_rule(sc.ERRNO(eno), number, *args)

    for name in _EPERM_CALLS:
        deny(name, errno.EPERM)
    for name in _ENOSYS_CALLS:
        deny(name, errno.ENOSYS)

    # clone's flags come second where the kernel has CONFIG_CLONE_BACKWARDS2 (s390).
    flags_arg = 1 if sc.system_arch() in (sc.Arch.S390, sc.Arch.S390X) else 0
    for flag in _CLONE_NEW_FLAGS:
        deny("clone", errno.EPERM, sc.Arg(flags_arg, sc.MASKED_EQ, flag, flag))

    for request in _TTY_IOCTLS:
        deny("ioctl", errno.EPERM, sc.Arg(1, sc.MASKED_EQ, _LOW32, request))

    deny("socket", errno.EACCES, sc.Arg(0, sc.MASKED_EQ, _LOW32, _AF_UNIX))

    # personality: allow only 0 (PER_LINUX) and 0xffffffff (query). libseccomp
    # allows one comparison per argument in a rule, so the denied set is a
    # union of single comparisons: a 32-bit value that is neither all zeros nor
    # all ones has, somewhere around the circle of its bits, a set bit i
    # followed by a clear bit i+1 (mod 32); values above 32 bits are denied too.
    for i in range(32):
        j = (i + 1) % 32
        deny("personality", errno.EPERM, sc.Arg(0, sc.MASKED_EQ, (1 << i) | (1 << j), 1 << i))
    if struct.calcsize("P") == 8:
        deny("personality", errno.EPERM, sc.Arg(0, sc.GT, _LOW32))

    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


@functools.cache
def step_filter_bpf() -> bytes:
    """The compiled step filter for the native architecture (classic BPF, for bwrap --seccomp)."""
    _check_binding()
    try:
        program = _compile()
    except (OSError, ValueError) as exc:
        raise SeccompUnavailableError(
            getattr(exc, "errno", None) or errno.EINVAL, f"compiling the step filter failed: {exc}"
        ) from exc
    if not program or len(program) % 8:
        raise SeccompUnavailableError(errno.EINVAL, "libseccomp exported a malformed BPF program")
    return program
