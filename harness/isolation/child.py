"""A child process of the harness, as the loader and the worker pool start one: MODULE run as `python -m` runs it,
in a session of its own, its output to a log, and a pipe of its own (passed by number in `RESULT_FD_VARIABLE`) on
which every message carries the token it is handed on its first line of input.

`python -m` (and `-c`) put the working directory first on `sys.path`: a `secrets.py` in the folder a user runs
the harness from (a case folder) would shadow the standard library's `secrets`, which makes the channel's
tokens. A child starts with that first entry replaced by the harness's own root (`-P` does the same, from
Python 3.11 only)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO

from harness.isolation.channel import Receiver, new_token

# The variables a child reads its result pipe and its parent from.
RESULT_FD_VARIABLE = "HARNESS_RESULT_FD"
PARENT_PID_VARIABLE = "HARNESS_PARENT_PID"
# Beyond the import deadline a child enforces itself (the registry's), before the parent gives up on an import
# that hangs in C code.
IMPORT_GRACE_S = 10.0
# How much of a child's log a record or a load error quotes.
LOG_TAIL_CHARS = 2000
# The folder that holds the `harness` package.
HARNESS_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOTSTRAP = (
    "import sys; sys.path[0] = {root!r}; import runpy; "
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
)


@dataclass
class Child:
    process: subprocess.Popen
    results: BinaryIO  # the read end of its pipe
    token: str
    receiver: Receiver


def start(
    module: str, log: Any, env: dict[str, str] | None = None, text: bool = False, cwd: str | None = None
) -> Child:
    """`python -m module`, its stdout and stderr to `log`, its pipe open; the token is the first line of its input
    (the caller writes the rest, or closes it)."""
    read_end, write_end = os.pipe()
    environment = dict(os.environ if env is None else env)
    environment.update({RESULT_FD_VARIABLE: str(write_end), PARENT_PID_VARIABLE: str(os.getpid())})
    process = subprocess.Popen(
        [sys.executable, "-c", _BOOTSTRAP.format(root=HARNESS_ROOT, module=module)],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        pass_fds=(write_end,),
        env=environment,
        start_new_session=True,
        text=text,
        cwd=cwd,
    )
    os.close(write_end)
    token = new_token()
    child = Child(process, os.fdopen(read_end, "rb", buffering=0), token, Receiver(token))
    try:
        process.stdin.write(token + "\n" if text else f"{token}\n".encode())
        process.stdin.flush()
    except OSError:  # it died at once: whoever reads its pipe finds out
        pass
    return child


def tail(text: str) -> str:
    """The end of a child's log, as records quote it."""
    return text[-LOG_TAIL_CHARS:]


def read_tail(handle: Any) -> str:
    """The end of a log open in binary mode, read from its end (a case can write gigabytes to its log)."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    # 4 bytes a character at most: enough bytes for the characters quoted, whatever the text.
    handle.seek(max(0, size - 4 * LOG_TAIL_CHARS))
    return tail(handle.read().decode("utf-8", errors="backslashreplace"))
