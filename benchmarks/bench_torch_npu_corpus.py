"""What a run costs in the surrogate's torch_npu mode (torch_npu's own backend, kernels run by triton-ascend's
interpreter) against its C++ mode, run by run, over the correct corpus.

    python benchmarks/bench_torch_npu_corpus.py [--select "-k correct --dtype float32 --mode inference"]
        [--stock] [--workers 1] [--json out.json]

One `harness run ... --device npu` per mode, each on a fresh Inductor cache, with the same selection and workers;
each record's `duration_s` (the case's own run: eager, compiled, judged) is paired by run across modes. Reported per
mode: the median and the worst run, and the median and worst ratio torch_npu / C++ of the paired runs. `--stock`
adds the torch_npu mode with triton-ascend's interpreter as it ships (`NPU_SURROGATE_INTERPRETER=stock`), the
figures before the surrogate's interpreter speed-ups. The goals (`docs/benchmarks.md`): the median run at most 3x
the C++ mode's, no run over 15 s on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SURROGATE_DIR = ROOT / "tests" / "npu_surrogate"
DEFAULT_SELECTION = "--tag correct --dtype float32 --mode inference"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--select", default=DEFAULT_SELECTION, help=f"harness run's selection (default: {DEFAULT_SELECTION})"
    )
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--stock", action="store_true", help="also the torch_npu mode with the interpreter as it ships")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    sys.path.insert(0, str(SURROGATE_DIR))
    from install_torch_npu import install as install_torch_npu
    from install_triton import install

    torch_npu_path = os.pathsep.join([str(SURROGATE_DIR), install(), install_torch_npu(), str(ROOT)])
    modes = {
        "cpp": {"PYTHONPATH": os.pathsep.join([str(SURROGATE_DIR), str(ROOT)])},
        "torch_npu": {"PYTHONPATH": torch_npu_path, "NPU_SURROGATE_CODEGEN": "torch_npu"},
    }
    if args.stock:
        modes["torch_npu_stock"] = {**modes["torch_npu"], "NPU_SURROGATE_INTERPRETER": "stock"}
    durations: dict[str, dict[str, float]] = {}
    walls: dict[str, float] = {}
    for mode, settings in modes.items():
        with tempfile.TemporaryDirectory() as scratch:
            env = {
                k: v for k, v in os.environ.items() if k not in ("NPU_SURROGATE_CODEGEN", "NPU_SURROGATE_INTERPRETER")
            }
            env.update(settings, TORCHINDUCTOR_CACHE_DIR=os.path.join(scratch, "cache"))
            results = os.path.join(scratch, "results.json")
            command = [sys.executable, "-m", "harness", "run", *shlex.split(args.select), "--device", "npu"]
            command += ["--workers", str(args.workers), "--json", results]
            started = time.perf_counter()
            done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
            walls[mode] = round(time.perf_counter() - started, 1)
            if done.returncode not in (0, 1) or not os.path.exists(results):
                print(f"error: {mode}: {(done.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                return 1
            records = json.loads(Path(results).read_text())["records"]
            durations[mode] = {_run_id(r): r["duration_s"] for r in records if r.get("status") != "skip"}
        times = sorted(durations[mode].values())
        worst = max(durations[mode], key=durations[mode].get)
        print(
            f"{mode:16s} {len(times)} runs, wall {walls[mode]:.0f} s: median {statistics.median(times):.1f} s, "
            f"worst {durations[mode][worst]:.1f} s ({worst})"
        )
    figures = {"walls_s": walls, "durations_s": durations, "ratios": {}}
    for mode in modes:
        if mode == "cpp":
            continue
        paired = [durations[mode][run] / durations["cpp"][run] for run in durations[mode] if durations["cpp"].get(run)]
        if not paired:
            continue
        ratio = {"median": round(statistics.median(paired), 2), "worst": round(max(paired), 2), "runs": len(paired)}
        figures["ratios"][f"{mode}/cpp"] = ratio
        print(f"{mode}/cpp: median {ratio['median']}x, worst {ratio['worst']}x over {ratio['runs']} paired runs")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


def _run_id(record: dict) -> str:
    return f"{record['case']}[{record['dtype']}-{record['mode']}{'-dynamic' if record.get('dynamic') else ''}]"


if __name__ == "__main__":
    sys.exit(main())
