"""What the surrogate NPU's Triton mode (triton-ascend's interpreter) and its torch_npu mode (torch_npu 2.14.0's own
backend, kernels run by that interpreter) cost against its C++ mode.

    python benchmarks/bench_triton_surrogate.py [--json out.json]

The same harness runs in both modes, each in processes of its own with a fresh Inductor cache (cold: every
run compiles), then once more on that cache (warm): each of the five triton-ascend classes on its hit cases
(`-k "<class> and hit" --inject <class> --bisect`) and the two seeds' small variants under `--bisect`. Reported
per mode and pass: the wall time of all the runs, and the ratios Triton / C++ and torch_npu / C++. No target: the
figures say how much of CI a test in those modes may take (`docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SURROGATE_DIR = ROOT / "tests" / "npu_surrogate"
CLASSES = (
    "first-launch-dropped-stores",
    "masked-store-lost",
    "half-scalar-arg",
    "reduction-small-inner",
    "masked-load-garbage",
)
RUNS = [["-k", f"{name} and hit", "--inject", name, "--bisect"] for name in CLASSES] + [
    ["seed_rmsnorm_weight_grad_small", "--inject", "reduction-partial", "--bisect"],
    ["seed_index_as_strided_view", "--dtype", "int64", "--inject", "boundary-downcast", "--bisect"],
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    sys.path.insert(0, str(SURROGATE_DIR))
    from install_torch_npu import install as install_torch_npu
    from install_triton import install

    modes = {
        "cpp": {"PYTHONPATH": os.pathsep.join([str(SURROGATE_DIR), str(ROOT)])},
        "triton": {
            "PYTHONPATH": os.pathsep.join([str(SURROGATE_DIR), install(), str(ROOT)]),
            "NPU_SURROGATE_CODEGEN": "triton",
        },
        "torch_npu": {
            "PYTHONPATH": os.pathsep.join([str(SURROGATE_DIR), install(), install_torch_npu(), str(ROOT)]),
            "NPU_SURROGATE_CODEGEN": "torch_npu",
        },
    }
    figures: dict[str, dict[str, float]] = {}
    for mode, settings in modes.items():
        with tempfile.TemporaryDirectory() as cache:
            env = {k: v for k, v in os.environ.items() if k != "NPU_SURROGATE_CODEGEN"}
            env.update(settings, TORCHINDUCTOR_CACHE_DIR=cache)
            for cache_state in ("cold", "warm"):
                started = time.perf_counter()
                for run in RUNS:
                    result = subprocess.run(
                        [sys.executable, "-m", "harness", "run", *run, "--device", "npu"],
                        env=env,
                        cwd=ROOT,
                        capture_output=True,
                        text=True,
                    )
                    if result.returncode not in (0, 1):
                        print(
                            f"error: {mode}: {' '.join(run)}: {result.stderr.strip().splitlines()[-1:]}",
                            file=sys.stderr,
                        )
                        return 1
                figures.setdefault(mode, {})[cache_state] = round(time.perf_counter() - started, 1)
                print(f"{mode:9s} {cache_state}: {figures[mode][cache_state]:7.1f} s ({len(RUNS)} harness runs)")
    ratios = {
        f"{mode}/cpp": {state: round(figures[mode][state] / figures["cpp"][state], 2) for state in ("cold", "warm")}
        for mode in ("triton", "torch_npu")
    }
    for name, ratio in ratios.items():
        print(f"{name}: cold {ratio['cold']}x, warm {ratio['warm']}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": figures, "ratio": ratios}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
