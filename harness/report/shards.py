"""Shards of one selection: the fingerprint each results file carries, and the check a merge makes with it.

`harness run --shard I/N` writes `shard: [I, N]` and `selection`, a fingerprint of the whole selection (every
run of it before sharding, and the identity they run under, `RunConfig.identity`: device, backends, compile
options, injection, dynamic shapes, torch's version, ...) into its results file's `run`. A merge (`harness
report`, `examples/nightly.sh merge`) of results files any of which is a shard takes them as one night only when
they make one up: the same fingerprint, the same N, and every shard 1..N there exactly once. Otherwise it
refuses, naming what is missing or foreign: a night with a shard lost (a host that never reported) must not go
green on the runs it has.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable


def selection_fingerprint(run_keys: Iterable[tuple[str, str, str]], setup: dict[str, Any]) -> str:
    """A short digest of a selection's runs (case, dtype, mode) and the setup they run under."""
    text = json.dumps({"runs": sorted(run_keys), "setup": setup}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_shards(metas: list[tuple[str, dict[str, Any]]]) -> None:
    """Raise ValueError, in one line, unless the results files (path, run metadata) that are shards make up one
    selection whole, and the others with them are none. Files that are no shard at all are not checked."""
    sharded = [(path, meta) for path, meta in metas if meta.get("shard")]
    if not sharded:
        return
    whole = [path for path, meta in metas if not meta.get("shard")]
    if whole:
        raise ValueError(
            f"{', '.join(whole)} {'is a whole run' if len(whole) == 1 else 'are whole runs'}, merged with shards "
            f"({sharded[0][0]}): merge the shards of one selection, or one whole run"
        )
    unmarked = [path for path, meta in sharded if not meta.get("selection")]
    if unmarked:
        raise ValueError(f"{', '.join(unmarked)}: a shard without its selection's fingerprint (an older harness)")
    first_path, first = sharded[0]
    for path, meta in sharded[1:]:
        if meta["selection"] != first["selection"] or meta["shard"][1] != first["shard"][1]:
            raise ValueError(
                f"{path} (shard {_shard(meta)}) is not a shard of the selection {first_path} (shard {_shard(first)}) "
                "is: another selection, -k, dtype, mode, device, backend, option or torch"
            )
    count = int(first["shard"][1])
    seen: dict[int, str] = {}
    for path, meta in sharded:
        index = int(meta["shard"][0])
        if index in seen:
            raise ValueError(f"shard {index}/{count} is given twice: {seen[index]} and {path}")
        seen[index] = path
    missing = [index for index in range(1, count + 1) if index not in seen]
    if missing:
        names = ", ".join(f"{index}/{count}" for index in missing)
        raise ValueError(
            f"shard{'s' if len(missing) > 1 else ''} {names} of this selection {'are' if len(missing) > 1 else 'is'} "
            "missing: a merge without it would judge part of the night as the whole"
        )


def _shard(meta: dict[str, Any]) -> str:
    index, count = meta["shard"]
    return f"{index}/{count}"
