"""What the CLI says and how it exits: exit codes, one-line usage errors, the console's lines and totals."""

from __future__ import annotations

import os
import re
import sys
from typing import Callable, Sequence

from harness import records as R
from harness.frontends import colour

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
# Terminal control sequences and other control characters: a case's text must never redraw the console.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")


class UsageError(Exception):
    pass


class ErrorsSaid(UsageError):
    """A usage error whose lines were said already (the load errors that left nothing to run): no line more."""


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def say(text: str, error: bool = False, paint: Callable[[str], str] | None = None) -> None:
    """Print a line with control characters removed and unprintable bytes escaped, whatever the encoding; `paint`
    colours the clean line where the stream takes colour (`colour.enabled`)."""
    stream = sys.stderr if error else sys.stdout
    text = _CONTROL.sub("", text)
    encoding = getattr(stream, "encoding", None) or "utf-8"
    text = text.encode(encoding, errors="backslashreplace").decode(encoding, errors="replace")
    if paint is not None and colour.enabled(stream):
        text = paint(text)
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:  # `harness run | head`: the reader left; the run goes on, quietly
        _silence(stream)


def _silence(stream) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def argv_is_cli() -> bool:
    return os.path.basename(sys.argv[0]) in ("__main__.py", "harness")


def totals(results: Sequence[R.CaseResult], load_errors: int = 0) -> str:
    """The last line: each status's count, and the case modules that did not load (they make the exit code 2)."""
    counts = {status: sum(r.status == status for r in results) for status in R.Status}
    said = [f"{n} {status}" for status, n in counts.items() if n]
    if load_errors:
        said.append(plural(load_errors, "load error"))
    return "== " + (", ".join(said) or "no run finished") + " =="
