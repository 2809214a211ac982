"""What a stage or graph-pass answer costs: compiles of the program, and time against the plain check.

    python benchmarks/bench_stages.py [--device cpu|cuda] [--json out.json]

For each failure whose answer is a stage (Dynamo, AOT autograd, decompositions) or an Inductor graph pass (the
upstream cases answered so, and the Dynamo emulation of tests/probe/test_stages.py), in one process with warm caches:
the plain check (eager, compiled, compare, the retry) and the same run with `--bisect`, three times each (the
median is kept). Reported per case: the answer, the compiles localization made (the record's `compiles`), and
the ratio of the two times.

Target (issue "precise stage and pass answers"): a stage or pass answer adds at most 2 compiles of the program.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CASES = (
    ("upstream_175154_interpolate_nearest_scale_1_3", "float32", "inference"),
    ("upstream_198201_interpolate_nearest_unchanged_dim", "float32", "inference"),
    ("upstream_new_split_overlapping_input_grad", "float32", "training"),
    ("upstream_198094_slice_scatter_reinplaced_into_mutated_input", "int64", "inference"),
    ("upstream_198131_copy_of_input_mutated_later", "float32", "inference"),
    ("upstream_new_as_strided_scatter_input_offset", "float32", "inference"),
)
TARGET_COMPILES = 2
REPEATS = 3


def measure(case, dtype, mode, config) -> tuple[float, object]:
    from harness.run.case import run_case

    times, record = [], None
    for _ in range(REPEATS):
        started = time.perf_counter()
        record = run_case(case, dtype, mode, config)
        times.append(time.perf_counter() - started)
    return statistics.median(times), record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()

    import torch

    from harness.registry import load_registry
    from harness.run.case import RunConfig

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "probe"))
    from test_stages import DYNAMO_BUG

    registry = load_registry().cases
    runs = [(registry[name], getattr(torch, dtype), mode) for name, dtype, mode in CASES]
    runs.append((DYNAMO_BUG, torch.float32, "inference"))
    rows = []
    for case, dtype, mode in runs:
        plain, record = measure(case, dtype, mode, RunConfig(device=args.device))
        if record.status not in ("fail", "xfail"):
            rows.append({"case": case.name, "status": str(record.status), "note": "does not fail here"})
            continue
        bisect, record = measure(case, dtype, mode, RunConfig(device=args.device, bisect=True))
        found = record.first_divergent_kernel
        rows.append(
            {
                "case": case.name,
                "dtype": str(dtype).removeprefix("torch."),
                "mode": mode,
                "answer": found.answer,
                "stage": found.stage,
                "graph_pass": found.graph_pass,
                "compiles": found.compiles,
                "changed_passes": len(found.graph_passes_changed),
                "plain_s": round(plain, 3),
                "bisect_s": round(bisect, 3),
                "ratio": round(bisect / plain, 2),
                "within_target": found.compiles <= TARGET_COMPILES,
            }
        )
    print(f"device {args.device}, torch {torch.__version__}; median of {REPEATS} runs, warm caches")
    print(f"{'case':58} {'answer':34} {'compiles':>8} {'plain s':>8} {'bisect s':>9} {'ratio':>6}")
    for row in rows:
        if "answer" not in row:
            print(f"{row['case']:58} {row['note']}")
            continue
        answer = f"{row['stage']}" + (f" ({row['graph_pass'].split(': ')[-1]})" if row["graph_pass"] else "")
        print(
            f"{row['case'][:58]:58} {answer[:34]:34} {row['compiles']:>8} {row['plain_s']:>8} "
            f"{row['bisect_s']:>9} {row['ratio']:>6}"
        )
    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump(rows, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
