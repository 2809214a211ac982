"""Run torch_npu 2.14's kernels (`fixtures/npu_kernels_torch_npu_2.14.json`) and the harness's variants of them
with triton-ascend's interpreter, against eager; prints one JSON line: [program, rewriter or null, max error].

Run in the surrogate's Triton mode (`tests/npu_surrogate` and triton-ascend on PYTHONPATH,
`NPU_SURROGATE_CODEGEN=triton`: its shims let the interpreter run Inductor's helpers). Each kernel's
`@triton.jit` function is launched as torch_npu's launcher does, on a grid of the cores' count
(`total_thread`), with the block sizes below: chosen so that each reduction loops, and its last chunk has
padding lanes, which is where the NPU's reduction classes spoil it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tempfile
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "npu_kernels_torch_npu_2.14.json"
# program -> (XBLOCK, R0_BLOCK, the rewriters whose variant must be wrong on it)
RUNS = {
    "row_sums": (8, 16, ["masked-load-garbage", "reduction-partial"]),
    "softmax": (8, 16, ["masked-load-garbage"]),
    "layer_norm": (8, 16, ["masked-load-garbage"]),
    "column_sums_k4_small": (4, 64, ["masked-load-garbage", "reduction-small-inner", "reduction-partial"]),
    "column_maxima_k4_small": (4, 64, ["reduction-small-inner"]),
    "sum_axes_0_2": (2, 4, ["masked-load-garbage", "reduction-partial", "reduction-axis-order"]),
    "rmsnorm_wgrad_like": (8, 64, ["reduction-partial"]),
}
HEADER = """import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
"""


def main() -> None:
    import torch
    import torch_npu  # noqa: F401 - the surrogate's Triton mode: the interpreter's shims

    from harness.inductor_compat.kernel_variants import rewrite

    programs = json.loads(FIXTURE.read_text())["programs"]
    folder = Path(tempfile.mkdtemp(prefix="npu-kernels-"))
    found = []
    for program, (xblock, r0_block, rewriters) in RUNS.items():
        entry = programs[program]
        (source,) = entry["kernels"].values()
        torch.manual_seed(0)
        inputs = [torch.randn(*shape) for shape in entry["shapes"]]
        expected = eval(entry["program"], {"torch": torch})(*inputs)  # noqa: S307 - the fixture's own table
        for rewriter in [None, *rewriters]:
            text = source if rewriter is None else rewrite(rewriter, "triton", source)
            out = _launch(
                folder,
                f"{program}_{(rewriter or 'kernel').replace('-', '_')}",
                text,
                inputs,
                expected,
                xblock,
                r0_block,
            )
            found.append([program, rewriter, float((out - expected).abs().nan_to_num(float("inf")).max())])
    print(json.dumps(found))


def _launch(folder: Path, name: str, source: str, inputs: list, expected, xblock: int, r0_block: int):
    import torch

    path = folder / f"{name}.py"
    path.write_text(HEADER + source[source.index("@triton.jit") :])
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel_name = re.search(r"^def (\w+)\(", source, re.M).group(1)
    params = re.search(rf"^def {kernel_name}\((.*?)\):", source, re.M | re.S).group(1)
    names = [p.split(":")[0].strip() for p in params.split(",") if "constexpr" not in p]
    out = torch.full_like(expected, float("nan"))
    given = iter(inputs)
    args = []
    for param in names:
        if param.startswith("in_ptr"):
            args.append(next(given))
        elif param.startswith("out_ptr"):
            args.append(out)
        else:  # a numel: the kernel sets its static value again
            value = re.search(rf"^\s*{param}\s*(?::\s*tl\.constexpr\s*)?=\s*(\d+)\s*$", source, re.M)
            args.append(int(value.group(1)))
    cores = int(re.search(r"total_thread = (\d+)", source).group(1))
    getattr(module, kernel_name)[(cores, 1, 1)](*args, XBLOCK=xblock, R0_BLOCK=r0_block)
    return out


if __name__ == "__main__":
    sys.exit(main())
