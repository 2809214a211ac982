"""The nightly job's costs: how suite wall time scales with `--workers`, and what the harness adds per case.

    python benchmarks/bench_nightly.py [--workers 1 2 3 4] [--tag correct] [--mode inference] [--json out.json]

Both measurements run whole processes, one after another in this one run, on
CPU Inductor with one shared Inductor cache directory warmed first (a nightly
host's second night):

- scaling: `harness run <selection> --workers N` for each N, timed after an
  untimed run with the same N (on CPU each worker gets cores / N threads, and
  Inductor's C++ kernels are compiled for that thread count: a nightly host
  keeps its N, so its cache is warm for it); speed-up is T(1) / T(N).
  Target (issue "The nightly job"): at least 0.7 x N for N up to 4. N above
  the core count cannot scale: run it on a host with as many cores as workers.
- overhead: the same selection run by the harness (one worker) against a bare
  script that, in one process, builds each case's program and inputs, runs it
  eagerly and compiled, and calls `torch.testing.assert_close`: the work every
  accuracy check does. Pairs alternate (bare, harness) `--pairs` times and the
  medians are compared. Target: the harness adds under 10% per case.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_EFFICIENCY, TARGET_OVERHEAD = 0.7, 0.10
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The bare check, as someone without the harness would write it, over the same cases.
BARE = """
import sys, torch
from harness.devices import get_device
from harness.execution import materialize_inputs
from harness.registry import load_registry
from harness.run_identity import runs_of
registry = load_registry()
cases = registry.select(tags=sys.argv[1].split(",") if sys.argv[1] else (), keyword=sys.argv[2] or None)
for case in cases:
    for dtype, mode in runs_of(case, None, [sys.argv[3]]):
        program = case.build(dtype)
        inputs = materialize_inputs(program.inputs, program.kwargs, dtype, get_device("cpu"), 0)
        torch._dynamo.reset()
        expected = program.fn(*inputs.args, **inputs.kwargs)
        inputs = materialize_inputs(program.inputs, program.kwargs, dtype, get_device("cpu"), 0)
        actual = torch.compile(program.fn)(*inputs.args, **inputs.kwargs)
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except (AssertionError, TypeError, ValueError):
            pass
"""


def selection_args(args: argparse.Namespace) -> list[str]:
    chosen = [arg for tag in args.tag for arg in ("--tag", tag)]
    return chosen + (["-k", args.keyword] if args.keyword else []) + ["--mode", args.mode]


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return elapsed


def harness_command(args: argparse.Namespace, workers: int, out: str) -> list[str]:
    return [sys.executable, "-m", "harness", "run", "--device", "cpu", *selection_args(args),
            "--workers", str(workers), "--json", out]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--tag", action="append", default=[], help="selection (default: --tag correct)")
    parser.add_argument("-k", dest="keyword", default=None)
    parser.add_argument("--mode", default="inference")
    parser.add_argument("--pairs", type=int, default=3, help="alternating bare/harness pairs for the overhead")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    args.tag = args.tag or ([] if args.keyword else ["correct"])

    work = tempfile.mkdtemp(prefix="bench-nightly-")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "inductor-cache"))
    out = os.path.join(work, "results.json")
    report: dict = {"machine": f"{platform.node()} {os.cpu_count()} cores", "python": platform.python_version(),
                    "selection": selection_args(args), "date": time.strftime("%Y-%m-%d")}
    import torch

    report["torch"] = torch.__version__
    print(f"warming the Inductor cache ({' '.join(selection_args(args))}) ...", flush=True)
    timed(harness_command(args, 1, out), env)
    with open(out) as handle:
        report["case_runs"] = len(json.load(handle)["records"])

    if not args.skip_scaling:
        curve = {}
        for workers in args.workers:
            timed(harness_command(args, workers, out), env)  # warms the cache for this thread count
            curve[workers] = timed(harness_command(args, workers, out), env)
            speedup = curve[args.workers[0]] / curve[workers] * args.workers[0]
            print(f"workers={workers}: {curve[workers]:.1f} s, speed-up {speedup:.2f}x, "
                  f"efficiency {speedup / workers:.2f} (target >= {TARGET_EFFICIENCY})", flush=True)
        report["scaling_s"] = curve

    if not args.skip_overhead:
        bare_script = os.path.join(work, "bare.py")
        with open(bare_script, "w") as handle:
            handle.write(BARE)
        bare_command = [sys.executable, bare_script, ",".join(args.tag), args.keyword or "", args.mode]
        bare, harnessed = [], []
        for _ in range(args.pairs):
            bare.append(timed(bare_command, env))
            harnessed.append(timed(harness_command(args, 1, out), env))
        overhead = statistics.median(harnessed) / statistics.median(bare) - 1
        per_case = (statistics.median(harnessed) - statistics.median(bare)) / max(1, report["case_runs"])
        print(f"overhead: harness {statistics.median(harnessed):.1f} s, bare {statistics.median(bare):.1f} s "
              f"for {report['case_runs']} case runs: {overhead:+.1%} ({per_case:+.2f} s per case run; "
              f"target < {TARGET_OVERHEAD:.0%})", flush=True)
        report.update(bare_s=bare, harness_s=harnessed, overhead=overhead)

    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
