"""What a dynamic run costs against a static run of the same case.

    python benchmarks/bench_dynamic.py [--device cpu|cuda] [--repeats N] [--json out.json]

For each case, in one process: the static run and the dynamic run (`--dynamic`: one compile with symbolic
sizes, eager and compiled at a second size too), each `--repeats` times (3), alternating; cold (Inductor's and AOT
autograd's caches off, so every run compiles, as a new program does) and warm (caches on, after one run of
each). The medians are kept; reported per case: both times and their ratio, both compile stages (Inductor
compiling with symbolic sizes is its own cost), the ratio of the rest of the run (the harness's: eager and
the compiled run at the second size), and whether the dynamic run passed without recompiling.

Target (issue "dynamic shapes"): a dynamic run costs at most 1.3x a static run of the same case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CASES = (
    ("relu_mlp", "float32", "inference"),
    ("relu_mlp", "float32", "training"),
    ("seed_index_as_strided_view", "int64", "inference"),
    ("seed_rmsnorm_weight_grad_small", "bfloat16", "inference"),
    ("layout_input_permuted", "float64", "inference"),
    ("correct_cat_matmuls", "float32", "training"),
    ("stores_masked_row_softmax", "float32", "inference"),
    ("transformer_encoder", "float32", "training"),
)
TARGET_RATIO = 1.3
REPEATS = 3


def measure(case, dtype, mode, configs, cold: bool, repeats: int) -> dict[str, tuple[float, object]]:
    """Median seconds and the last record per configuration, the configurations' runs alternating."""
    from harness.inductor_compat import compile_caches_off
    from harness.run.case import run_case

    times: dict[str, list[float]] = {name: [] for name in configs}
    records: dict[str, object] = {}
    for _ in range(repeats):
        for name, config in configs.items():
            with compile_caches_off() if cold else contextlib.nullcontext():
                started = time.perf_counter()
                records[name] = run_case(case, dtype, mode, config)
                times[name].append(time.perf_counter() - started)
    return {name: (statistics.median(times[name]), records[name]) for name in configs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()

    import torch

    from harness.registry import load_registry
    from harness.run.case import RunConfig, run_case

    registry = load_registry()
    configs = {"static": RunConfig(device=args.device), "dynamic": RunConfig(device=args.device, dynamic=True)}
    rows = []
    print(
        f"{'case':48} {'':5} {'static':>8} {'dynamic':>8} {'ratio':>6} {'compile':>8} {'dyn.comp':>8} "
        f"{'rest x':>8}  dynamic run"
    )
    for name, dtype_name, mode in CASES:
        case, dtype = registry.cases[name], getattr(torch, dtype_name)
        for config in configs.values():  # the first compile of each (imports, ISA checks) is no one's cost
            run_case(case, dtype, mode, config)
        for cold in (True, False):
            found = measure(case, dtype, mode, configs, cold, args.repeats)
            (static, plain), (dynamic, record) = found["static"], found["dynamic"]
            # Inductor's own part: its compile with symbolic sizes against the static one (the record's compile
            # stage); the rest is the harness's: eager and the compiled run at the second size.
            compiles = plain.timings.get("compile", 0.0), record.timings.get("compile", 0.0)
            rest = (static - compiles[0], dynamic - compiles[1])
            row = {
                "case": name,
                "dtype": dtype_name,
                "mode": mode,
                "caches": "off" if cold else "warm",
                "static_s": round(static, 3),
                "dynamic_s": round(dynamic, 3),
                "ratio": round(dynamic / static, 3),
                "static_compile_s": round(compiles[0], 3),
                "dynamic_compile_s": round(compiles[1], 3),
                "ratio_without_compile": round(rest[1] / rest[0], 3) if rest[0] > 0 else None,
                "status": str(record.status),
                "recompiled": record.recompiled,
                "sizes": record.dynamic_sizes,
            }
            rows.append(row)
            print(
                f"{name + '[' + dtype_name + '-' + mode + ']':48} {row['caches']:5} {static:8.2f} {dynamic:8.2f} "
                f"{row['ratio']:6.2f} {compiles[0]:8.2f} {compiles[1]:8.2f} {row['ratio_without_compile'] or 0:8.2f}"
                f"  {row['status']}{', recompiled' if record.recompiled else ''}"
            )
    for caches in ("off", "warm"):
        ratios = [r["ratio"] for r in rows if r["caches"] == caches]
        compile_ratios = [
            r["dynamic_compile_s"] / r["static_compile_s"]
            for r in rows
            if r["caches"] == caches and r["static_compile_s"]
        ]
        rest = [r["ratio_without_compile"] for r in rows if r["caches"] == caches and r["ratio_without_compile"]]
        print(
            f"caches {caches}: median ratio {statistics.median(ratios):.2f}, worst {max(ratios):.2f} "
            f"(target {TARGET_RATIO}); Inductor's compile alone {statistics.median(compile_ratios):.2f}; "
            f"the rest of the run {statistics.median(rest):.2f}"
        )
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as handle:
            json.dump(
                {"device": args.device, "torch": torch.__version__, "target_ratio": TARGET_RATIO, "rows": rows},
                handle,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
