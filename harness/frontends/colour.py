"""Statuses coloured on a terminal as pytest colours them: a pass green, a failure or error red, a skip or an
expected failure yellow; the totals line by its worst status. Never where the output is not a terminal, where
`NO_COLOR` is set (no-color.org), or `PY_COLORS=0`; always with `PY_COLORS=1` or `FORCE_COLOR` (pytest's rules,
`_pytest/_io/terminalwriter.py`)."""

from __future__ import annotations

import os
import re
from typing import IO

from harness import records as R

_CODES = {"green": "32", "red": "31", "yellow": "33"}
# An unexpected pass fails the run (the harness's expected failures are strict, as pytest's strict xfail, which
# pytest reports as a red FAILED).
STATUS_COLOURS = {
    R.PASS: "green",
    R.FAIL: "red",
    R.ERROR: "red",
    R.XPASS: "red",
    R.NONDETERMINISTIC: "red",
    R.SKIP: "yellow",
    R.XFAIL: "yellow",
}


def enabled(stream: IO[str]) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("PY_COLORS") == "1" or os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("PY_COLORS") == "0" or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, colour: str) -> str:
    return f"\x1b[{_CODES[colour]}m{text}\x1b[0m"


def status_word(line: str, status: str) -> str:
    """`line` with its first word that is the status (`PASS`, `FAIL`, ...) in the status's colour."""
    colour = STATUS_COLOURS.get(R.Status(status))
    if colour is None:
        return line
    return re.sub(rf"\b{re.escape(status.upper())}\b", lambda m: paint(m.group(0), colour), line, count=1)


def totals_line(line: str, statuses: set[str], load_errors: int = 0) -> str:
    """The totals line in the colour of its worst status, as pytest's: red where a run failed or a case module
    did not load, yellow where runs were only skipped or failed as expected, green otherwise."""
    if load_errors or any(R.is_failing(s) for s in statuses):
        return paint(line, "red")
    if statuses and statuses <= {R.SKIP, R.XFAIL}:
        return paint(line, "yellow")
    return paint(line, "green") if statuses else line
