"""Localization cost: `--bisect` against the plain accuracy check, and against torch's CompilerBisector.

    python benchmarks/bench_bisect.py [--device cpu|cuda] [--case relu_mlp] [--mode MODE] [--json out.json]

Inductor's own codegen fault (`inject_relu_bug_TESTING_ONLY = "accuracy"`)
makes every generated ReLU wrong (or `--inject fault-offset@K`, for models
without ReLU). Each measurement runs in a fresh process,
one after another in this one run, all sharing one fresh Inductor cache
directory, so peak memory is per measurement and "warm" means what a second
nightly run sees:

- plain-cold: the accuracy check (eager, compiled, compare) on an empty cache;
- plain-warm: the same again, caches warm;
- bisect: the check with `--bisect` (warm caches: the probe reads the lowering
  facts kept beside the cache entries);
- compiler-bisector: torch's CompilerBisector on the same check, stopped
  after `--compiler-bisector-timeout` seconds (its time is then a lower bound).

Targets (issue "Localization at the cost of one plain check"): bisect time at
most 1.5x plain-warm, bisect peak device memory at most 1.1x plain-warm.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

MEASUREMENTS = ("plain-cold", "plain-warm", "bisect", "compiler-bisector")
TARGET_TIME, TARGET_MEMORY = 1.5, 1.1


def relu_bug(device: str) -> dict[str, str]:
    return {("cpp" if device == "cpu" else "triton") + ".inject_relu_bug_TESTING_ONLY": "accuracy"}


def declared_mode(parser: argparse.ArgumentParser, case_name: str, mode: str | None) -> str:
    # run_case runs any mode it is given; a mode the case does not declare measures another program.
    from harness.registry import load_registry

    case = load_registry().cases.get(case_name)
    if case is None:
        parser.error(f"unknown case {case_name!r}")
    if mode is not None and mode not in case.modes:
        parser.error(f"{case_name} runs in {', '.join(case.modes)}, not {mode}")
    return mode or case.modes[0]


def measure(kind: str, device: str, case_name: str, mode: str, inject: str | None) -> dict:
    import torch

    from harness.devices import get_device
    from harness.registry import load_registry
    from harness.run.case import RunConfig, run_case

    case = load_registry().cases[case_name]
    dtype = case.dtypes[0]
    adapter = get_device(device)
    adapter.reset_peak_memory()
    started = time.perf_counter()
    result: dict = {}
    if kind == "compiler-bisector":
        from torch._inductor import config as inductor_config
        from torch._inductor.compiler_bisector import CompilerBisector

        def accurate() -> bool:
            torch._dynamo.reset()
            # CompilerBisector picks the backend and subsystem through its own state; the fault is a config.
            with inductor_config.patch({} if inject else relu_bug(device)):
                return run_case(case, dtype, mode, RunConfig(device=device, inject=inject)).status == "pass"

        found = CompilerBisector.do_bisect(accurate)
        result["answer"] = (
            None
            if found is None
            else {"backend": found.backend, "subsystem": found.subsystem, "bisect_number": found.bisect_number}
        )
        result["right_stage"] = found is not None and found.backend == "inductor"
    else:
        config = RunConfig(
            device=device,
            bisect="on-failure" if kind == "bisect" else None,
            inject=inject,
            compile_options={} if inject else relu_bug(device),
        )
        record = run_case(case, dtype, mode, config)
        result["status"] = str(record.status)
        found = record.first_divergent_kernel
        if found is not None:
            result["answer"] = {
                "answer": str(found.answer),
                "graph": found.graph,
                "launch_index": found.launch_index,
                "launches": found.launches,
                "name": found.name,
                "isolated": found.isolated,
                "stage": found.stage,
                "reruns": found.reruns,
                "stages_checked": found.stages_checked,
            }
            hits = (record.injection_stats.hits if record.injection_stats else None) or []
            expected = hits[0].split(":", 1)[1] if hits else "relu"
            result["right_stage"] = found.stage == "inductor" and expected in (found.name or "")
        result["timings"] = record.timings
    result["seconds"] = round(time.perf_counter() - started, 2)
    peak = adapter.peak_memory_bytes()
    result["peak_bytes"] = peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result["peak_kind"] = "device allocator peak" if peak is not None else "process max RSS"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--case", default="relu_mlp")
    parser.add_argument("--mode", help="one of the case's modes (default: its first, e.g. train_step for models)")
    parser.add_argument(
        "--inject", help="a fault instead of Inductor's ReLU bug, e.g. fault-offset@600 (models without ReLU)"
    )
    parser.add_argument("--skip-compiler-bisector", action="store_true")
    parser.add_argument(
        "--compiler-bisector-timeout",
        type=float,
        default=600.0,
        help="stop CompilerBisector after this many seconds (its time is then a lower bound)",
    )
    parser.add_argument("--json", help="write the figures here as well, to compare two runs")
    parser.add_argument("--measure", choices=MEASUREMENTS, help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.device, args.case, args.mode, args.inject)))
        return
    args.mode = declared_mode(parser, args.case, args.mode)  # once, here: each child gets it as --mode

    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="bench-bisect-"))
    figures: dict[str, dict] = {}
    for kind in MEASUREMENTS:
        if kind == "compiler-bisector" and args.skip_compiler_bisector:
            continue
        command = [
            sys.executable,
            __file__,
            "--measure",
            kind,
            "--device",
            args.device,
            "--case",
            args.case,
            "--mode",
            args.mode,
        ] + (["--inject", args.inject] if args.inject else [])
        limit = args.compiler_bisector_timeout if kind == "compiler-bisector" else None
        started = time.perf_counter()
        try:
            child = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=limit, start_new_session=True
            )
        except subprocess.TimeoutExpired:
            figures[kind] = {
                "seconds": round(time.perf_counter() - started, 1),
                "lower_bound": True,
                "unfinished": f"still bisecting after {limit:.0f} s",
            }
        else:
            figures[kind] = (
                json.loads(child.stdout.strip().splitlines()[-1])
                if child.returncode == 0
                else {"error": child.stderr.strip().splitlines()[-3:]}
            )
        print(f"{kind:18} {json.dumps(figures[kind])}", flush=True)

    ratios = {}
    warm, cold, bisect = figures["plain-warm"], figures["plain-cold"], figures["bisect"]
    if all("seconds" in f and "error" not in f for f in (warm, cold, bisect)):
        ratios = {
            "bisect_time_vs_plain_warm": round(bisect["seconds"] / warm["seconds"], 2),
            "bisect_time_vs_plain_cold": round(bisect["seconds"] / cold["seconds"], 2),
            "bisect_peak_memory_vs_plain_warm": round(bisect["peak_bytes"] / warm["peak_bytes"], 2),
        }
        if "seconds" in figures.get("compiler-bisector", {}):
            ratios["compiler_bisector_time_vs_bisect"] = round(
                figures["compiler-bisector"]["seconds"] / bisect["seconds"], 2
            )
    for name, value in ratios.items():
        print(f"{name:36} {value}")
    print(f"targets: bisect time <= {TARGET_TIME}x plain-warm, peak memory <= {TARGET_MEMORY}x plain-warm")
    if args.json:
        import torch

        with open(args.json, "w") as handle:
            json.dump(
                {
                    "date": time.strftime("%Y-%m-%d"),
                    "device": args.device,
                    "case": args.case,
                    "mode": args.mode,
                    "fault": args.inject or "inject_relu_bug_TESTING_ONLY=accuracy",
                    "machine": platform.node(),
                    "torch": torch.__version__,
                    "figures": figures,
                    "ratios": ratios,
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
