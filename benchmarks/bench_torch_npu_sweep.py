"""The full OpInfo sweep through torch_npu's compiler, projected from a uniform sample of it: the wall time per run
of `harness run --tag opinfo --full --shard I/N --device npu` in the surrogate's torch_npu mode, times the sweep's
runs (N times the sample's).

    python benchmarks/bench_torch_npu_sweep.py [--shard 3/200] [--workers 2] [--backend triton_experimental]
        [--json out.json]

The goal (`docs/benchmarks.md`, issue 68): the full sweep through `triton_experimental` in at most 4 hours on two
cores. The sample's set-up (its run's `first_record_s`: loading and planning the selection, starting and warming
the workers up, and its first run) is paid once by the whole sweep as by the sample; every other run's share of
the wall time (`duration_s` less the set-up) is paid once per run. The installers' checks are left out. Also
reported: the median of the runs' own `duration_s` (the case process's part), and the rest of each run's wall
time, which forking, the case process's start, the judge and the worker's round trip take.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SURROGATE_DIR = ROOT / "tests" / "npu_surrogate"
GOAL_HOURS = 4.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard", default="3/200", help="the sample: the I-th of N parts of the full sweep")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="triton_experimental", help="torch_npu's backend (--npu-backend)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    sys.path.insert(0, str(SURROGATE_DIR))
    from install_torch_npu import install as install_torch_npu
    from install_triton import install

    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(SURROGATE_DIR), install(), install_torch_npu(), str(ROOT)]),
        NPU_SURROGATE_CODEGEN="torch_npu",
    )
    with tempfile.TemporaryDirectory() as scratch:
        results = os.path.join(scratch, "sweep.json")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "cache")
        command = [sys.executable, "-m", "harness", "run", "--tag", "opinfo", "--full", "--shard", args.shard]
        command += ["--device", "npu", "--npu-backend", args.backend, "--workers", str(args.workers), "-q"]
        done = subprocess.run([*command, "--json", results], cwd=ROOT, env=env, capture_output=True, text=True)
        if not os.path.exists(results):
            print(f"error: the sweep's sample wrote no results (exit {done.returncode}): {done.stderr[-500:]}")
            return 1
        with open(results) as handle:
            written = json.load(handle)
    records = written["records"]
    wall = written["run"]["duration_s"]
    set_up = written["run"]["first_record_s"]
    parts = int(args.shard.split("/")[1])
    sweep_runs = len(records) * parts  # the sample is one part in `parts` of the sweep
    per_run = (wall - set_up) / (len(records) - 1)
    projected_h = (set_up + per_run * (sweep_runs - 1)) / 3600
    own = statistics.median(r["duration_s"] or 0.0 for r in records)
    rest = per_run * args.workers - statistics.mean(r["duration_s"] or 0.0 for r in records)
    statuses = dict(collections.Counter(record["status"] for record in records))
    figures = {
        "shard": args.shard,
        "backend": args.backend,
        "workers": args.workers,
        "runs": len(records),
        "statuses": statuses,
        "wall_s": round(wall, 1),
        "set_up_s": round(set_up, 1),
        "wall_per_run_s": round(per_run, 3),
        "median_case_s": round(own, 3),
        "rest_per_run_per_worker_s": round(rest, 3),
        "full_sweep_runs": sweep_runs,
        "full_sweep_hours": round(projected_h, 2),
        "goal_hours": GOAL_HOURS,
    }
    print(
        f"{len(records)} runs ({', '.join(f'{v} {k}' for k, v in sorted(statuses.items()))}) in {wall:.0f} s "
        f"with {args.workers} workers ({set_up:.0f} s of it set-up): {per_run:.2f} s a run; a run's case process "
        f"{own:.2f} s (median), the rest {rest:.2f} s a run per worker. The full sweep ({sweep_runs} runs): "
        f"{projected_h:.1f} h (goal {GOAL_HOURS:g} h)"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
