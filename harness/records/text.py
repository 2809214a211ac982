"""Text for records and consoles: numbers, shapes, one-line exceptions, text safe to print and store."""

from __future__ import annotations

import math


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _dims(values: list[int]) -> str:
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def injection_label(name: str) -> str:
    """How a run under `--inject NAME` is labelled: a kernel fault the harness injected (`fault-*`), or an
    emulation of another backend's behaviour (the NPU launcher's, seed 002's reductions)."""
    return f"injected fault: {name}" if name.startswith("fault-") else f"emulation: {name}"


def one_line(text: str) -> str:
    """A user's text (a reason, a tag, a message) on one console line: its line breaks shown as \\n, so that
    it can never print a line of its own ("[2/2] PASS ...") into the harness's output."""
    return text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r")


def safe_text(text: str) -> str:
    """Text that encodes anywhere: lone surrogates (undecodable bytes of a file name, say) escaped."""
    return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def exception_text(exc: BaseException) -> str:
    """An exception's message, even when its __str__ raises; undecodable bytes escaped."""
    try:
        return safe_text(str(exc))
    except Exception:
        return f"<{type(exc).__name__} whose message could not be read>"


def exception_line(exc: BaseException, limit: int | None = None) -> str:
    """The first line of an exception's message (at most `limit` characters), or its type's name."""
    lines = exception_text(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:limit]
