"""Extraction cost: what `--extract` adds to a localized run, against one plain accuracy check.

    python benchmarks/bench_extract.py [--device cpu|cuda] [--json out.json] [--only NAME ...]

For each row of SCENARIOS, three runs in fresh processes, one after another in
this one run, sharing one fresh Inductor cache directory ("warm" is what a
second nightly run sees):

- plain: the accuracy check (eager, compiled, compare), run twice: cold (the check that found a new
  failure compiles it afresh) and warm (caches full; the stricter measure);
- bisect: the check with `--bisect` (warm);
- extract: the check with `--bisect --extract DIR` (warm).

The added cost is the record's `timings.extract` (capturing the launch, writing
each form, verifying each: compiles of the subgraph from scratch included);
the target (issue "From a named kernel to a verified, standalone reproducer")
is at most 1.5x the plain check's duration (`duration_s`), printed against the
warm and the cold check: verification compiles new programs from scratch,
about a second each on two CPU cores, which a warm check of a small case
never pays. The wall-clock difference between the extract and bisect processes is
printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

TARGET = 1.5
# (name, harness selection and options): failures extraction starts from, of each kind.
SCENARIOS = [
    (
        "seed in a larger graph, boundary-downcast",
        ["seed_index_as_strided_index_put", "--dtype", "int64", "--inject", "boundary-downcast"],
    ),
    (
        "relu_mlp training, backward fault",
        ["relu_mlp", "--mode", "training", "--inject", "fault-scale@*threshold_backward*"],
    ),
    ("upstream #197895 floor divide", ["upstream_197895_float_floor_divide_off_by_one", "--dtype", "float32"]),
    ("upstream #197739 argmin", ["upstream_197739_argmin_transposed_intermediate"]),
    ("upstream #163932 softmax", ["upstream_163932_softmax_scaled_sin_view_nan"]),
    ("longformer_ci, backward fault", ["longformer_ci", "--inject", "fault-scale@*gelu_backward*"]),
]


def run(selection: list[str], device: str, cache: str, extra: list[str], json_path: str) -> tuple[dict, float]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "harness", "run", *selection, "--device", device, "-q", "--json", json_path, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - started
    with open(json_path) as handle:
        records = json.load(handle)["records"]
    return records[0], wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--only", action="append", default=[], help="scenario names containing this text")
    args = parser.parse_args()
    rows = []
    for name, selection in SCENARIOS:
        if args.only and not any(text in name for text in args.only):
            continue
        with tempfile.TemporaryDirectory() as work:
            cache, out = os.path.join(work, "cache"), os.path.join(work, "repros")
            path = os.path.join(work, "r.json")
            cold, _ = run(selection, args.device, cache, [], path)
            plain, plain_wall = run(selection, args.device, cache, [], path)
            _, bisect_wall = run(selection, args.device, cache, ["--bisect"], path)
            extracted, extract_wall = run(selection, args.device, cache, ["--bisect", "--extract", out], path)
        added = extracted.get("timings", {}).get("extract")
        ratio = None if added is None else added / max(plain["duration_s"], 1e-9)
        cold_ratio = None if added is None else added / max(cold["duration_s"], 1e-9)
        row = {
            "scenario": name,
            "plain_s": plain["duration_s"],
            "plain_cold_s": cold["duration_s"],
            "extract_s": added,
            "ratio": ratio,
            "ratio_to_cold": cold_ratio,
            "wall_added_s": round(extract_wall - bisect_wall, 2),
            "extracted": extracted.get("extracted"),
            "lines": (extracted.get("extraction") or {}).get("graph_lines"),
            "status": extracted["status"],
        }
        rows.append(row)
        verdict = "ok" if ratio is not None and ratio <= TARGET else "OVER"
        nan = float("nan")
        print(
            f"{name:42} plain warm {row['plain_s']:5.2f}s cold {row['plain_cold_s']:5.2f}s  extract "
            f"{added if added is not None else nan:5.2f}s  ratio warm {ratio if ratio is not None else nan:5.2f} "
            f"({verdict}) cold {cold_ratio if cold_ratio is not None else nan:5.2f}  wall added "
            f"{row['wall_added_s']:6.2f}s  {row['extracted']} ({row['lines']} lines)",
            flush=True,
        )
    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump({"device": args.device, "target": TARGET, "rows": rows}, handle, indent=1)
    return 0 if all(r["ratio"] is not None and r["ratio"] <= TARGET for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
