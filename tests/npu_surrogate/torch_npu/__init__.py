"""A surrogate `torch_npu`: the harness's NPU code path, run on a machine that has no NPU.

With `tests/npu_surrogate` on `PYTHONPATH`, `import torch_npu` does on the CPU what torch_npu does at import:

- device "npu" (`_device.py`): PrivateUse1 renamed, backed by a C++ extension built once per torch version
  (host memory, views that alias their base, a CPU fallback for every other operator), and `torch.npu`
  (`npu/`);
- the compiler side, as torch_npu 2.14.0 ships it (`utils/_dynamo.py`, `_inductor/`): `torch.compile` accepts
  the `npu_backend` option, and the first compile loads the backend asked for through `_InductorNpuRegistry`
  (an unknown name falls back to the default backend without a word, `triton_experimental` writes Inductor's
  config as its `_activate` does). The backends generate Inductor's C++ CPU kernels, run on host memory; with
  `NPU_SURROGATE_CODEGEN=triton`, Inductor's Triton kernels, run by triton-ascend's interpreter;
- with `NPU_SURROGATE_NO_FLOAT64=1`, no float64 tensor on the device (not every NPU operator has one): whatever computes
  in float64 on the device fails there as it would on an NPU.

Nothing it computes is an NPU result, and it says so: `SURROGATE`, which the harness prints on every record.
"""

from __future__ import annotations

import os

from . import _triton_codegen

# What every record, console line and report of a run on this device says.
SURROGATE = (
    "surrogate NPU (CPU-backed, Triton kernels run by triton-ascend's interpreter), not an NPU result"
    if _triton_codegen.wanted()
    else "surrogate NPU (CPU-backed), not an NPU result"
)
# The variables that chose this surrogate's mode: the command that reproduces a run sets them again.
ENVIRONMENT = {
    name: os.environ[name]
    for name in (_triton_codegen.MODE_VARIABLE, "NPU_SURROGATE_BACKENDS", "NPU_SURROGATE_NO_FLOAT64")
    if os.environ.get(name)
}
# The torch_npu release whose compiler registry this follows (the wheel read: torch-npu 2.14.0 on PyPI).
__version__ = "2.14.0+surrogate"

if _triton_codegen.wanted():
    _triton_codegen.prepare_environment()
from . import _device  # noqa: E402  (registers the device and torch.npu)
from .utils import _dynamo  # noqa: E402

_device.register()
_dynamo.patch_inductor_wrapper()
if _triton_codegen.wanted():
    _triton_codegen.install_shims()


def npu_fusion_attention(*args, **kwargs):
    """torch_npu's fused attention kernel, which libraries import from torch_npu when it is there (transformers'
    `integrations/npu_flash_attention.py` at import). The surrogate has no such kernel."""
    raise NotImplementedError(f"npu_fusion_attention: the {SURROGATE} has no fused attention kernel")
