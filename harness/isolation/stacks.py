"""Where a case's process was when its time ran out: the stacks `faulthandler` printed, and the case's own frames
in them.

A case process asks `faulthandler.dump_traceback_later` for every thread's stack shortly before its timeout
(`case_process`); the stacks land in the worker's log, whose end the timed-out run's record carries. The console
and the record's message name the innermost frames of the case's own code: frames of files outside the harness,
the Python installation and its packages.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig

_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")
DUMP_MARKER = "Timeout ("  # faulthandler's first line of a later dump: `Timeout (0:04:58)!`


# How much of a worker's log is read for a timed-out run's stacks.
STACKS_CHARS = 64_000


def stacks_in(log_tail: str) -> str:
    """The last stack dump in `log_tail`, from its first line; empty where there is none."""
    start = log_tail.rfind(DUMP_MARKER)
    return log_tail[start:] if start >= 0 else ""


def before_timeout(timeout_s: float) -> float:
    """When to print the stacks: a little before the timeout, so they are in the log when the run is stopped."""
    return max(timeout_s - min(2.0, timeout_s / 10), timeout_s * 0.5)


def _not_the_cases() -> tuple[str, ...]:
    harness_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = {harness_root, sys.prefix, sys.base_prefix}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        if where := sysconfig.get_paths().get(name):
            paths.add(where)
    return tuple(os.path.join(os.path.abspath(p), "") for p in paths)


def case_frames(stacks: str, limit: int = 3) -> list[str]:
    """The innermost frames of the case's own code in a stack dump (`stacks_in`), innermost first, as
    `file:line in function`; the main thread's (faulthandler lists it last) before the others'."""
    threads: list[list[str]] = []
    outside = _not_the_cases()
    for line in stacks.splitlines():
        if _THREAD.match(line):
            threads.append([])
        elif (frame := _FRAME.match(line)) and threads:
            path = os.path.abspath(frame["file"])
            if not path.startswith(outside) and not frame["file"].startswith("<"):
                threads[-1].append(f"{frame['file']}:{frame['line']} in {frame['function']}")
    for frames in reversed(threads):
        if frames:
            return frames[:limit]
    return []
