"""A process and every process it started, found and killed together (Linux; elsewhere the process alone).

A process that runs case code makes itself a child subreaper
(`PR_SET_CHILD_SUBREAPER`): a process a case starts stays its descendant
even when its own parent exits or it starts a session of its own
(`start_new_session=True`, a double fork), so walking `/proc/<pid>/task/*/children`
from it finds them all. `kill_tree` stops the whole tree first, so nothing
forks or is re-parented while it is being killed.
"""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def become_subreaper() -> bool:
    """Keep every descendant of this process its own, whatever their parents do."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def signal_on_parent_death(signum: int) -> bool:
    return _prctl(PR_SET_PDEATHSIG, signum)


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):  # the task ended meanwhile
            continue
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a child that exited and waits to be reaped has nothing left to run)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, parents before their children."""
    found, queue = [], [pid]
    while queue:
        for child in children(queue.pop(0)):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def exit_text(code: int | None, what: str) -> str:
    """How a process ended, as a record says it: "<what> killed by SIGSEGV", "<what> exited with code 3"
    (`code` as subprocess and the wait status give it: a negative signal number when killed)."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{what} killed by {name}"
    return f"{what} exited with code {code}"


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants(pid: int) -> None:
    """SIGKILL every descendant of `pid` (stopped first, until no new one appears), not `pid` itself."""
    seen: set[int] = set()
    while True:
        found = [p for p in descendants(pid) if p not in seen]
        if not found:
            break
        for child in found:
            _signal(child, signal.SIGSTOP)
        seen.update(found)
    for child in seen:
        _signal(child, signal.SIGKILL)


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every descendant: `pid` is stopped first so that it neither forks nor reaps meanwhile."""
    _signal(pid, signal.SIGSTOP)
    kill_descendants(pid)
    _signal(pid, signal.SIGKILL)
