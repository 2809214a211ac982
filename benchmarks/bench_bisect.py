"""Localization cost: bisection against the plain accuracy check and against CompilerBisector.

    python benchmarks/bench_bisect.py [--device cpu|cuda] [--case relu_mlp] [--mode training]

Inductor's own codegen fault (`inject_relu_bug_TESTING_ONLY = "accuracy"`)
makes the generated ReLU wrong. Each measurement runs in a fresh process, one
after another in this one run, so peak memory is per measurement:

- plain: the accuracy check (eager, compiled, compare), cold Inductor caches;
- plain-warm: the same again, caches warm (what a second nightly run pays);
- bisect: the check with --bisect (FX graph cache off, so every graph is lowered);
- compiler-bisector: torch's CompilerBisector on the same check.

Targets: bisect time <= 2x plain, bisect peak device memory <= 3x plain.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

MEASUREMENTS = ("plain", "plain-warm", "bisect", "compiler-bisector")


def relu_bug(device: str) -> dict[str, str]:
    return {("cpp" if device == "cpu" else "triton") + ".inject_relu_bug_TESTING_ONLY": "accuracy"}


def measure(kind: str, device: str, case_name: str, mode: str) -> dict:
    import torch

    from harness.devices import get_device
    from harness.registry import load_registry
    from harness.runner import RunConfig, run_case

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
            with inductor_config.patch(relu_bug(device)):
                return run_case(case, dtype, mode, RunConfig(device=device)).status == "pass"

        found = CompilerBisector.do_bisect(accurate)
        result["answer"] = None if found is None else {
            "backend": found.backend, "subsystem": found.subsystem, "bisect_number": found.bisect_number}
    else:
        config = RunConfig(device=device, bisect=kind == "bisect", compile_options=relu_bug(device))
        record = run_case(case, dtype, mode, config)
        result["status"] = record.status
        kernel = record.first_divergent_kernel or {}
        if kernel:
            result["answer"] = {k: kernel.get(k) for k in ("graph", "launch_index", "launches", "name", "nodes", "isolated")}
    result["seconds"] = round(time.perf_counter() - started, 2)
    peak = adapter.peak_memory_bytes()
    result["peak_bytes"] = peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result["peak_kind"] = "device allocator peak" if peak is not None else "process max RSS"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--case", default="relu_mlp")
    parser.add_argument("--mode", default="training")
    parser.add_argument("--skip-compiler-bisector", action="store_true")
    parser.add_argument("--compiler-bisector-timeout", type=float, default=1800.0,
                        help="stop CompilerBisector after this many seconds (its time is then a lower bound)")
    parser.add_argument("--json", help="write the figures here as well")
    parser.add_argument("--measure", choices=MEASUREMENTS, help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.device, args.case, args.mode)))
        return

    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="bench-bisect-"))
    figures = {}
    for kind in MEASUREMENTS:
        if kind == "compiler-bisector" and args.skip_compiler_bisector:
            continue
        command = [sys.executable, __file__, "--measure", kind, "--device", args.device, "--case", args.case,
                   "--mode", args.mode]
        limit = args.compiler_bisector_timeout if kind == "compiler-bisector" else None
        try:
            child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            figures[kind] = {"seconds": limit, "unfinished": f"still bisecting after {limit:.0f} s (a lower bound)"}
        else:
            figures[kind] = (json.loads(child.stdout.strip().splitlines()[-1]) if child.returncode == 0
                             else {"error": child.stderr.strip().splitlines()[-1:]})
        print(f"{kind:18} {json.dumps(figures[kind])}", flush=True)

    plain, bisect = figures["plain"], figures["bisect"]
    ratios = {
        "bisect_time_vs_plain_cold": bisect["seconds"] / plain["seconds"],
        "bisect_time_vs_plain_warm": bisect["seconds"] / figures["plain-warm"]["seconds"],
        "bisect_peak_memory_vs_plain": bisect["peak_bytes"] / plain["peak_bytes"],
    }
    if "seconds" in figures.get("compiler-bisector", {}):
        ratios["compiler_bisector_time_vs_bisect"] = figures["compiler-bisector"]["seconds"] / bisect["seconds"]
    for name, value in ratios.items():
        print(f"{name:36} {value:.2f}")
    print("targets: bisect time <= 2x plain, bisect peak memory <= 3x plain")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": args.device, "case": args.case, "mode": args.mode, "figures": figures,
                       "ratios": ratios}, handle, indent=1)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
