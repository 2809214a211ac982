"""The nightly job's costs: how suite wall time scales with `--workers`, and what the harness adds per case.

    python benchmarks/bench_nightly.py [--workers 1 2 3 4] [--tag correct] [--mode inference] [--full --shard 1/10]
        [--cache-dir DIR] [--warm-workers 8] [--skip-warm] [--json out.json]

Both measurements run whole processes, one after another in this one run, on
CPU Inductor with one shared Inductor cache directory warmed first (a nightly
host's second night):

- scaling: `harness run <selection> --workers N` for each N; speed-up is
  T(1) / T(N). Every worker gets the same thread count (`--threads-per-worker`,
  by default the cores over the largest N): N workers then do the same work
  as one, N at a time, and one cache warms them all (Inductor's C++ kernels
  are compiled for a thread count). Target (issue "The nightly job"): at
  least 0.7 x N for N up to 4. N above the core count cannot scale: run it on
  a host with as many cores as workers. What a run pays once (start-up,
  loading) does not shrink with N: a selection must be a nightly's size, not
  a few seconds of cases, for the curve to mean anything.
- overhead: the same selection run by the harness (one worker) against a bare
  script that, in one process, builds each case's program and inputs, runs it
  eagerly and compiled, and calls `torch.testing.assert_close`: the work every
  accuracy check does. Pairs alternate (bare, harness) `--pairs` times and the
  medians are compared, for the whole run and per case: each side's time for
  the selection less its time for its first case alone (what a run pays once:
  interpreter, torch, compiler and case loading), over the remaining case runs.
  Target: the harness adds under 10% per case.
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
from harness.run.program import materialize_inputs
from harness.registry import load_registry
from harness.run.config import runs_of
registry = load_registry()
names = sys.argv[4].split(",") if len(sys.argv) > 4 else ()
cases = registry.select(names, tags=sys.argv[1].split(",") if sys.argv[1] else (), keyword=sys.argv[2] or None)
for case in cases:
    for dtype, mode in runs_of(case, None, None if sys.argv[3] == "all" else [sys.argv[3]]):
        try:  # a case whose eager run raises (an input an op rejects) is that case's end, not the script's
            program = case.build(dtype)
            inputs = materialize_inputs(program.inputs, program.kwargs, dtype, get_device("cpu"), 0)
            torch._dynamo.reset()
            # Inference is checked without autograd, as the harness does (a compile without it is cheaper).
            with torch.no_grad() if mode == "inference" else torch.enable_grad():
                expected = program.fn(*inputs.args, **inputs.kwargs)
                inputs = materialize_inputs(program.inputs, program.kwargs, dtype, get_device("cpu"), 0)
                actual = torch.compile(program.fn)(*inputs.args, **inputs.kwargs)
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except Exception:
            pass
"""


def selection_args(args: argparse.Namespace) -> list[str]:
    chosen = [arg for tag in args.tag for arg in ("--tag", tag)]
    modes = [] if args.mode == "all" else ["--mode", args.mode]
    sweep = (["--full"] if args.full else []) + (["--shard", args.shard] if args.shard else [])
    return chosen + (["-k", args.keyword] if args.keyword else []) + modes + sweep


def timed(command: list[str], env: dict[str, str], ok: tuple[int, ...] = (0, 1)) -> float:
    """Seconds the command took; it must exit with one of `ok` (the harness: 1 when a case fails)."""
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode not in ok:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return elapsed


def _records(path: str) -> list[dict]:
    with open(path) as handle:
        return json.load(handle)["records"]


def harness_command(args: argparse.Namespace, workers: int, out: str, names: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness",
        "run",
        *names,
        "--device",
        "cpu",
        *selection_args(args),
        "--workers",
        str(workers),
        "--json",
        out,
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--tag", action="append", default=[], help="selection (default: --tag correct)")
    parser.add_argument("-k", dest="keyword", default=None)
    parser.add_argument("--mode", default="inference", help="a mode, or all (every mode of each case)")
    parser.add_argument("--full", action="store_true", help="case sources' full sweeps (OpInfo: every op and layout)")
    parser.add_argument("--shard", metavar="I/N", help="this part of the selection (a nightly-sized slice of --full)")
    parser.add_argument(
        "--cache-dir",
        help="the Inductor cache directory to warm and share (default: a new one; "
        "one kept between invocations spares a second cold warm-up)",
    )
    parser.add_argument(
        "--warm-workers",
        type=int,
        default=None,
        help="workers for the cold warm-up (default: the largest --workers; the thread count per "
        "worker stays the measured one, which the compiled kernels depend on)",
    )
    parser.add_argument(
        "--skip-warm",
        action="store_true",
        help="--cache-dir is already warm for this selection and thread count (an earlier "
        "invocation warmed it): a long curve split over invocations, e.g. one per N (speed-ups are "
        "printed against this invocation's first N: compare the times across invocations)",
    )
    parser.add_argument(
        "--threads-per-worker",
        type=int,
        default=None,
        help="OMP threads of every worker (default: the cores over the largest --workers)",
    )
    parser.add_argument("--pairs", type=int, default=3, help="alternating bare/harness pairs for the overhead")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    args.tag = args.tag or ([] if args.keyword else ["correct"])
    if (args.full or args.shard) and not args.skip_overhead:
        parser.error("the overhead's bare script selects by tag and keyword only: add --skip-overhead")
    if args.skip_warm and (not args.cache_dir or not args.skip_overhead or args.skip_scaling):
        parser.error("--skip-warm measures scaling in a --cache-dir warmed before: give it, and --skip-overhead")

    work = tempfile.mkdtemp(prefix="bench-nightly-")
    threads = args.threads_per_worker or max(1, (os.cpu_count() or 1) // max(args.workers))
    cache = args.cache_dir or os.path.join(work, "inductor-cache")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, OMP_NUM_THREADS=str(threads))
    out = os.path.join(work, "results.json")
    report: dict = {
        "machine": f"{platform.node()} {os.cpu_count()} cores",
        "python": platform.python_version(),
        "selection": selection_args(args),
        "threads_per_worker": threads,
        "date": time.strftime("%Y-%m-%d"),
    }
    import torch

    report["torch"] = torch.__version__
    records = None
    if not args.skip_warm:
        print(
            f"warming the Inductor cache ({' '.join(selection_args(args))}; {threads} threads per worker) ...",
            flush=True,
        )
        # The fastest way to a warm cache, one for every N: each worker compiles for the same thread count.
        report["warm_s"] = timed(harness_command(args, args.warm_workers or max(args.workers), out), env)
        records = _records(out)

    if not args.skip_scaling:
        curve, case_time = {}, {}
        for workers in args.workers:
            curve[workers] = timed(harness_command(args, workers, out), env)
            measured = _records(out)
            records = records or measured
            # Where the time went: the cases' own time (summed over workers), and what is left of the wall
            # time once that is shared out (start-up, loading, the parent's bookkeeping).
            case_time[workers] = sum(r["duration_s"] for r in measured)
            speedup = curve[args.workers[0]] / curve[workers] * args.workers[0]
            outside = curve[workers] - case_time[workers] / workers
            print(
                f"workers={workers}: {curve[workers]:.1f} s, speed-up {speedup:.2f}x, "
                f"efficiency {speedup / workers:.2f} (target >= {TARGET_EFFICIENCY}); "
                f"cases {case_time[workers]:.1f} s in all, outside them {outside:.1f} s",
                flush=True,
            )
        report["scaling_s"], report["case_time_s"] = curve, case_time
    report["case_runs"] = len(records)

    if not args.skip_overhead:
        first = (records[0]["case"],)  # a one-case run measures what every run pays once (startup, loading)
        first_runs = sum(r["case"] == first[0] for r in records)
        bare_script = os.path.join(work, "bare.py")
        with open(bare_script, "w") as handle:
            handle.write(BARE)
        bare_command = [sys.executable, bare_script, ",".join(args.tag), args.keyword or "", args.mode]
        bare, harnessed, bare_one, harnessed_one = [], [], [], []
        for _ in range(args.pairs):
            bare.append(timed(bare_command, env, ok=(0,)))
            harnessed.append(timed(harness_command(args, 1, out), env))
            bare_one.append(timed(bare_command + [first[0]], env, ok=(0,)))
            harnessed_one.append(timed(harness_command(args, 1, out, first), env))
        h, b, h1, b1 = (statistics.median(t) for t in (harnessed, bare, harnessed_one, bare_one))
        overhead = h / b - 1
        print(
            f"overhead, whole run: harness {h:.1f} s, bare {b:.1f} s for {report['case_runs']} case runs: "
            f"{overhead:+.1%}",
            flush=True,
        )
        # Per case: what each further case costs, the fixed start (one case) taken out of both.
        marginal = max(1, report["case_runs"] - first_runs)
        per_case_harness, per_case_bare = (h - h1) / marginal, (b - b1) / marginal
        per_case = per_case_harness / per_case_bare - 1
        print(
            f"overhead per case: harness {per_case_harness * 1000:.0f} ms, bare {per_case_bare * 1000:.0f} ms: "
            f"{per_case:+.1%} (target < {TARGET_OVERHEAD:.0%}); fixed start: harness {h1:.1f} s, bare {b1:.1f} s",
            flush=True,
        )
        report.update(
            bare_s=bare,
            harness_s=harnessed,
            overhead=overhead,
            bare_one_case_s=bare_one,
            harness_one_case_s=harnessed_one,
            overhead_per_case=per_case,
        )

    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
