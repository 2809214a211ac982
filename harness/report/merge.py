"""Run metadata of several results files (shards of one night, xdist workers) as one run."""

from __future__ import annotations

import datetime as _dt
from typing import Any

SUMMED_OR_SPANNED = {"started_at", "finished_at", "duration_s"}


def merge_run_meta(metas: list[dict[str, Any]]) -> dict[str, Any]:
    metas = [m for m in metas if m]
    if len(metas) <= 1:
        return dict(metas[0]) if metas else {}
    merged: dict[str, Any] = {}
    for key in _keys_in_order(metas):
        if key in SUMMED_OR_SPANNED:
            continue
        values = [m[key] for m in metas if key in m]
        merged[key] = _merge_versions(values) if key == "versions" else _merge_values(values)
    merged.update(_merge_times(metas))
    return merged


def _keys_in_order(metas: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for meta in metas:
        for key in meta:
            seen.setdefault(key, None)
    return list(seen)


def _merge_values(values: list[Any]) -> Any:
    """One value when the shards agree, else every distinct value once, in order seen."""
    distinct: list[Any] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if item not in distinct:
                distinct.append(item)
    return distinct[0] if len(distinct) == 1 else distinct


def _merge_versions(values: list[Any]) -> dict[str, str]:
    merged: dict[str, list[str]] = {}
    for versions in values:
        for name, version in (versions or {}).items():
            seen = merged.setdefault(name, [])
            if str(version) not in seen:
                seen.append(str(version))
    # Shards built from different wheels is worth seeing, not hiding behind the first one.
    return {name: " | ".join(found) for name, found in merged.items()}


def _merge_times(metas: list[dict[str, Any]]) -> dict[str, Any]:
    starts = [_parse_time(m.get("started_at")) for m in metas]
    durations = [float(m["duration_s"]) for m in metas if isinstance(m.get("duration_s"), (int, float))]
    result: dict[str, Any] = {}
    known_starts = [(s, m) for s, m in zip(starts, metas) if s is not None]
    if known_starts:
        earliest = min(s for s, _ in known_starts)
        result["started_at"] = next(m["started_at"] for s, m in known_starts if s == earliest)
    elif any(m.get("started_at") for m in metas):
        result["started_at"] = min(str(m["started_at"]) for m in metas if m.get("started_at"))
    ends = [_end_time(s, m) for s, m in zip(starts, metas)]
    if known_starts and ends and all(e is not None for e in ends):
        # Shards may run side by side or one after another: the span covers both.
        result["duration_s"] = (max(ends) - min(s for s, _ in known_starts)).total_seconds()
        result["finished_at"] = max(ends).isoformat()
    elif durations:
        result["duration_s"] = max(durations)
    if durations:
        result["shard_time_s"] = sum(durations)
    return result


def _end_time(start: _dt.datetime | None, meta: dict[str, Any]) -> _dt.datetime | None:
    finished = _parse_time(meta.get("finished_at"))
    if finished is not None:
        return finished
    if start is not None and isinstance(meta.get("duration_s"), (int, float)):
        return start + _dt.timedelta(seconds=float(meta["duration_s"]))
    return None


def _parse_time(value: Any) -> _dt.datetime | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _dt.datetime.fromtimestamp(value, _dt.timezone.utc)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    # Naive and aware times cannot be compared; naive ones are taken as UTC.
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=_dt.timezone.utc)
