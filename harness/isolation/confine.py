"""What a case's process may write: its own directories and the devices, no other file (Linux Landlock).

Cases run as the user who runs the harness, so without this a case can write any file the harness can: the
journal of the run (a forged line carried by `--resume`), the reports, another case's compile caches while it
runs, the worker's precompiled header. Landlock (Linux 5.13 and later; `landlock(7)`) lets an unprivileged process
give up rights for itself and every process it starts, irrevocably. A case process, before its case's module is
imported, keeps the right to write, create, remove, rename or truncate only beneath its own compile caches and
temporary directory (`inductor_compat.compile_caches`, `TMPDIR`), beneath `/dev` (device nodes, shared memory),
its own `/proc` entry, and beneath the folders a user names in `HARNESS_CASE_WRITABLE` (`os.pathsep`-separated).
Reading is not restricted, nor is writing to descriptors it inherited (its channel to the worker, its log).
Where the kernel has Landlock's ABI 6 (Linux 6.12), the case process also cannot signal a process outside its own
tree (stop the harness with SIGSTOP, kill another case) or reach another's abstract Unix sockets; ptrace of a
process outside it is refused by every Landlock version.

A kernel without Landlock (or where it is turned off) leaves the case process unconfined: `confine()` says so
and the run's header repeats it (`docs/nightly.md`: what a case can still reach).
"""

from __future__ import annotations

import ctypes
import os
from typing import Sequence

WRITABLE_VARIABLE = "HARNESS_CASE_WRITABLE"

# The syscall numbers are the same on every architecture (added after the tables were unified, Linux 5.13).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Landlock's filesystem rights that change the filesystem (`include/uapi/linux/landlock.h`), by the ABI that
# added them; executing, reading files and listing directories stay unrestricted.
_WRITE_RIGHTS_BY_ABI = (
    (1, (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)),
    (2, 1 << 13),  # REFER: linking or renaming a file into another directory
    (3, 1 << 14),  # TRUNCATE
)

_SCOPES_ABI = 6
_SCOPES = (1 << 0) | (1 << 1)  # LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, LANDLOCK_SCOPE_SIGNAL


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none or it is turned off."""
    try:
        version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (AttributeError, OSError):
        return 0
    return max(int(version), 0)


def unconfined_reason() -> str | None:
    """Why case processes would run unconfined on this machine, or None."""
    if not os.uname().sysname == "Linux":
        return "not Linux"
    if landlock_abi() < 1:
        return "the kernel has no Landlock (Linux 5.13 or later, enabled)"
    return None


def writable_folders(own: Sequence[str]) -> list[str]:
    """The folders a case process may write beneath: its own, `/dev`, its own `/proc` entry (`/proc/self` names
    this process's when the rule is made: CUDA's initialisation writes there, and fails with error 304 without it,
    seen on an H100 host with torch 2.11), and those the user names."""
    named = [p for p in os.environ.get(WRITABLE_VARIABLE, "").split(os.pathsep) if p]
    return [*own, "/dev", "/proc/self", *named]


def confine(own: Sequence[str]) -> str | None:
    """Give up, for this process and every process it starts, the right to change the filesystem anywhere but
    beneath `writable_folders(own)`. Returns None once confined, else why it is not."""
    reason = unconfined_reason()
    if reason:
        return reason
    abi = landlock_abi()
    rights = 0
    for added_in, bits in _WRITE_RIGHTS_BY_ABI:
        if abi >= added_in:
            rights |= bits
    libc = _libc()
    # From ABI 6, the scopes too: no signal to, and no abstract socket of, a process outside this one's domain
    # (the harness, its worker, another case: a case that stops the harness with SIGSTOP hangs the run).
    attributes = (ctypes.c_uint64 * 3)(rights, 0, _SCOPES if abi >= _SCOPES_ABI else 0)
    size = 24 if abi >= _SCOPES_ABI else 8
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attributes), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"Landlock refused a ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        for folder in writable_folders(own):
            try:
                parent = os.open(folder, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a named folder that does not exist: nothing beneath it to write
            try:
                rule = _PathBeneath(rights, parent)
                if libc.syscall(_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule), 0) < 0:
                    return f"Landlock refused the folder {folder}: {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(parent)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"no_new_privs refused: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(_RESTRICT_SELF, ruleset, 0) < 0:
            return f"Landlock refused to confine: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return None
