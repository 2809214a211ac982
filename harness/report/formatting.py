"""Jinja filters that turn record values into short, stable text."""

from __future__ import annotations

import math
from typing import Any

from harness.records import injection_label


def number(value: Any, digits: int = 4) -> str:
    """Significant digits, not decimals: errors span 1e-9 to 1e4 in one table."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return _grouped(value)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value.is_integer() and abs(value) < 1e15:
        return _grouped(int(value))
    return f"{value:.{digits}g}"


def _grouped(value: int) -> str:
    # Element counts reach 10^8: "24,957,300" reads at a glance, "24957300" does not.
    return f"{value:,}" if abs(value) >= 10_000 else str(value)


def cosine(value: Any) -> str:
    # Healthy outputs sit at 0.99999x: six decimals are where the story is.
    if value is None:
        return "–"
    value = float(value)
    return "nan" if math.isnan(value) else f"{value:.6f}"


def percent(value: Any) -> str:
    if value is None:
        return "–"
    value = float(value)
    if value == 0:
        return "0%"
    if 0 < value < 0.01:
        return "<0.01%"
    return f"{value:.3g}%"


def duration(seconds: Any) -> str:
    if seconds is None:
        return "–"
    seconds = float(seconds)
    if not math.isfinite(seconds):  # "inf"/"nan" in a record: no measurement to show
        return "–"
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def shape(value: Any) -> str:
    if value is None:
        return "–"
    return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"


def sort_key(value: Any) -> str:
    """Value for the click-to-sort script: numbers as numbers, missing values last."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isnan(value):
            return "1e308"  # NaN errors sort with the worst
        return repr(max(-1e308, min(1e308, float(value))))
    return str(value)


FILTERS = {
    "num": number,
    "cos": cosine,
    "pct": percent,
    "dur": duration,
    "shape": shape,
    "sortkey": sort_key,
    "injection": injection_label,
}
