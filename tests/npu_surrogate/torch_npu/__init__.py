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
import sys

from . import _eager_gaps, _triton_codegen, _wheel_backend
from ._limits import unsupported  # noqa: F401  (what the surrogate cannot run: the harness skips it, saying why)

# The torch_npu mode's wheel: found on the path before anything else (one clear line when it is not there).
_WHEEL = _wheel_backend.wheel_folder() if _wheel_backend.wanted() else None
# The torch_npu release whose compiler this follows: the wheel's own in the torch_npu mode; else the registry this
# package mirrors (the wheel read: torch-npu 2.14.0 on PyPI).
__version__ = _wheel_backend.wheel_version(_WHEEL) if _WHEEL else "2.14.0+surrogate"
# What every record, console line and report of a run on this device says.
if _WHEEL:
    SURROGATE = (
        f"surrogate NPU (CPU-backed; torch_npu {__version__}'s own Inductor backend, Triton kernels run by "
        "triton-ascend's interpreter), not an NPU result"
    )
elif _triton_codegen.wanted():
    SURROGATE = "surrogate NPU (CPU-backed, Triton kernels run by triton-ascend's interpreter), not an NPU result"
else:
    SURROGATE = "surrogate NPU (CPU-backed), not an NPU result"
# The variables that chose this surrogate's mode: the command that reproduces a run sets them again.
ENVIRONMENT = {
    name: os.environ[name]
    for name in (_triton_codegen.MODE_VARIABLE, "NPU_SURROGATE_BACKENDS", "NPU_SURROGATE_NO_FLOAT64")
    if os.environ.get(name)
}
# Folders besides this package's that a command reproducing a run puts on PYTHONPATH (the wheel's Python).
SEARCH_PATH = [_WHEEL] if _WHEEL else []
# Whether a process that compiled may still fork processes that run on the device: the surrogate's own backends
# start no thread; torch_npu's own depend on the backend and the release (the default backend starts a pool of
# compile threads as it loads), which only a trial tells (None: the harness's worker tries it in a fork).
FORKS_AFTER_COMPILE = None if _WHEEL else True
# Where this surrogate's eager ops (the CPU's kernels) are not an NPU's, each with the form an NPU's takes and why:
# a run the gap alone explains is a skip naming it (`_eager_gaps.py`).
EAGER_GAPS = _eager_gaps.gaps(wheel=bool(_WHEEL))
# Whether every load and store of a Triton kernel is checked against its launch's buffers (`_memory_check`): the
# harness's `fault-store-past-end` runs only where it is, and a kernel stopped there is a failure naming it.
MEMORY_CHECKED = bool(_triton_codegen.wanted() or _WHEEL) and os.environ.get("NPU_SURROGATE_MEMCHECK", "") != "0"

if _triton_codegen.wanted() or _WHEEL:
    _triton_codegen.prepare_environment()
if _WHEEL:
    # torch_npu's `_inductor/__init__.py` starts Inductor's compile-worker pool at import unless this is 0: a pool's
    # threads in a process that forks (the harness's worker) hang the forks.
    os.environ.setdefault("TORCH_WARM_POOL", "0")
from . import _device  # noqa: E402  (registers the device and torch.npu)

_device.register()
if _WHEEL:
    try:
        _wheel_backend.install(sys.modules[__name__])  # torch_npu's own compiler side, from the wheel
    except Exception as exc:  # noqa: BLE001 - a release whose Python the surrogate cannot load: one line, why
        raise _wheel_backend.WheelUnloadable(__version__, _WHEEL, exc) from exc
    _triton_codegen.install_shims(device_interface=False)  # torch_npu registers its own
    _wheel_backend.install_launch_shims()
else:
    from .utils import _dynamo  # noqa: E402

    _dynamo.patch_inductor_wrapper()
    if _triton_codegen.wanted():
        _triton_codegen.install_shims()


def __getattr__(name: str):
    # torch_npu exports each of its operators at top level (`torch_npu.npu_dtype_cast`), the compiler's lowering
    # lists import them from there (2.11, 2.12): the schema's op, without a kernel here but for the casts.
    import torch

    if name.startswith(("npu_", "_npu_")) and hasattr(torch.ops.npu, name):
        return getattr(torch.ops.npu, name)
    raise AttributeError(f"module 'torch_npu' has no attribute {name!r}")


def npu_fusion_attention(*args, **kwargs):
    """torch_npu's fused attention kernel, which libraries import from torch_npu when it is there (transformers'
    `integrations/npu_flash_attention.py` at import). The surrogate has no such kernel."""
    raise NotImplementedError(f"npu_fusion_attention: the {SURROGATE} has no fused attention kernel")
