"""Every fault kind at every kernel launch: does localization answer, and name the launch?

    python benchmarks/fault_sweep.py [--device cpu|cuda] [--case relu_mlp --case transformer_encoder]
                                     [--mode training] [--processes N] [--json out.json]

For each case, a clean run with `--bisect always` counts the launches of the
compiled run (forward, backward and extern kernels) and must pass with no
divergence; then each `fault-<kind>@<launch>` runs with `--bisect`. A faulted
run either passes (the outputs absorb the fault: a zeroed buffer scaled, one
ulp under a ReLU), or fails and must get an answer. The table gives, per case
and fault kind: runs, failing runs, failing runs with an answer other than
`unlocalized`, and failing runs whose answer names the faulted launch.

Targets (issue "Localization you can trust"): 100% of failing runs answered,
at least 95% naming the faulted launch. Exit code 1 when either is missed.
Runs are spread over `--processes` processes (one device is shared).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import functools
import json
import multiprocessing
import os
import platform
import sys
import time

# Spawned workers import this file as their main module: they need the checkout on the path too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

KINDS = ("offset", "scale", "nan", "zero-tail", "stride-collapse", "ulp")
TARGET_ANSWERED, TARGET_NAMED = 1.0, 0.95


def _share_cores(processes: int) -> None:
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // processes))


@functools.lru_cache(maxsize=None)
def _registry():  # once per worker process
    from harness.registry import load_registry

    return load_registry()


def _run(device: str, case_name: str, mode: str, inject: str | None) -> dict:
    from harness.run.case import RunConfig, run_case

    case = _registry().cases[case_name]
    record = run_case(
        case, case.dtypes[0], mode, RunConfig(device=device, inject=inject, bisect="on-failure" if inject else "always")
    )
    found = record.first_divergent_kernel
    return {
        "inject": inject,
        "status": str(record.status),
        "error": record.error.message[:300] if record.error else None,
        "answer": str(found.answer) if found else None,
        "launch_index": found.launch_index if found else None,
        "launches": found.launches if found else None,
        "diverged": bool(found and found.diverged),
        "line": found.line()[:300] if found else None,
    }


def sweep(device: str, case_name: str, mode: str, kinds: list[str], pool: concurrent.futures.Executor) -> dict:
    clean = _run(device, case_name, mode, None)
    if clean["status"] != "pass" or clean["diverged"] or not clean["launches"]:
        return {"clean": clean, "error": "the clean run must pass with no divergence"}
    jobs = {
        pool.submit(_run, device, case_name, mode, f"fault-{kind}@{k}"): (kind, k)
        for kind in kinds
        for k in range(clean["launches"])
    }
    table: dict[str, collections.Counter] = {kind: collections.Counter() for kind in kinds}
    misses = []
    for job in concurrent.futures.as_completed(jobs):
        kind, k = jobs[job]
        row = table[kind]
        row["runs"] += 1
        try:
            result = job.result()
        except Exception as exc:  # a crash of the harness is a miss, not a lost row
            result = {"status": "crash", "error": repr(exc)[:300], "answer": None, "launch_index": None}
        if result["status"] == "pass":
            row["absorbed"] += 1
            continue
        row["failing"] += 1
        answered = result["status"] == "fail" and result["answer"] not in (None, "unlocalized")
        named = answered and result["launch_index"] == k
        row["answered"] += answered
        row["named"] += named
        if not named:
            misses.append({"fault": f"{kind}@{k}", **result})
    return {
        "launches": clean["launches"],
        "table": {kind: dict(row) for kind, row in table.items()},
        "misses": sorted(misses, key=lambda m: m["fault"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--case", action="append", help="default: relu_mlp and transformer_encoder")
    parser.add_argument("--mode", default="training")
    parser.add_argument("--kind", action="append", choices=KINDS, help="default: every fault kind")
    parser.add_argument("--processes", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    parser.add_argument("--json", help="write the figures here as well")
    args = parser.parse_args()
    cases, kinds = args.case or ["relu_mlp", "transformer_encoder"], args.kind or list(KINDS)
    started = time.perf_counter()
    figures = {}
    context = multiprocessing.get_context("spawn")  # no torch state inherited from the parent
    with concurrent.futures.ProcessPoolExecutor(
        args.processes, mp_context=context, initializer=_share_cores, initargs=(args.processes,)
    ) as pool:
        for case_name in cases:
            figures[case_name] = sweep(args.device, case_name, args.mode, kinds, pool)
    ok = True
    print(f"{'case':22} {'fault':16} {'runs':>5} {'absorbed':>8} {'failing':>8} {'answered':>9} {'named':>6}")
    for case_name, figure in figures.items():
        if "error" in figure:
            print(f"{case_name}: {figure['error']}: {figure['clean']}")
            ok = False
            continue
        totals = collections.Counter()
        for kind, row in figure["table"].items():
            totals.update(row)
            print(
                f"{case_name:22} {kind:16} {row.get('runs', 0):5} {row.get('absorbed', 0):8} {row.get('failing', 0):8} "
                f"{row.get('answered', 0):9} {row.get('named', 0):6}"
            )
        failing = totals["failing"] or 1
        answered, named = totals["answered"] / failing, totals["named"] / failing
        figure["answered_share"], figure["named_share"] = round(answered, 4), round(named, 4)
        print(
            f"{case_name:22} {'all':16} {totals['runs']:5} {totals['absorbed']:8} {totals['failing']:8} "
            f"{totals['answered']:9} {totals['named']:6}   answered {answered:.1%}, named {named:.1%} "
            f"({figure['launches']} launches)"
        )
        for miss in figure["misses"]:
            print(f"    miss {miss['fault']}: {miss['status']} {miss.get('error') or miss['line']}")
        ok = ok and answered >= TARGET_ANSWERED and named >= TARGET_NAMED
    elapsed = round(time.perf_counter() - started, 1)
    print(
        f"{elapsed} s with {args.processes} processes; targets: answered {TARGET_ANSWERED:.0%}, named >= {TARGET_NAMED:.0%}"
    )
    if args.json:
        import torch

        with open(args.json, "w") as handle:
            json.dump(
                {
                    "date": time.strftime("%Y-%m-%d"),
                    "device": args.device,
                    "mode": args.mode,
                    "machine": platform.node(),
                    "torch": torch.__version__,
                    "seconds": elapsed,
                    "processes": args.processes,
                    "figures": figures,
                },
                handle,
                indent=1,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
