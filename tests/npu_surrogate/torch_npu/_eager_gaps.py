"""Where the surrogate's eager ops are not an NPU's: each gap's op, the form an NPU's eager op takes there, and why.

The surrogate's eager ops are the CPU's kernels. Where the compiler on the NPU computes an op in a form of its
own on purpose, or where upstream's decomposition follows a convention for every device but the CPU, a compiled
run differs from the surrogate's eager for no fault of the compiler. The harness (`Device.eager_gaps`) runs such a
run's eager side once more with each gap's op in the form below; where the compiled result then matches, the run
is a skip naming the gap (`harness/run/eager_gaps.py`), never a failure, and never a pass: the surrogate cannot
tell what an NPU would give.

`gaps()`: op name (`aten::erf`, any overload) -> (form, reason). A form is called as `form(op, args, kwargs)`.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

LOW_PRECISION = (torch.float16, torch.bfloat16)

# Upstream's batch norm decomposition (torch/_decomp/decompositions.py, `native_batch_norm_helper`, torch 2.13
# line 2150: `if input.device.type == "cpu": save_mean = save_mean.to(dtype=input.dtype)`) gives the batch
# statistics of a float16 or bfloat16 input in float32 on every device but the CPU. The surrogate's eager is the
# CPU's kernel, which gives them in the input's dtype.
BATCH_NORM_STATS = (
    "the surrogate's eager batch norm is the CPU's kernel, which gives the batch statistics (save_mean, save_invstd) "
    "of a float16 or bfloat16 input in that dtype; Inductor's decomposition gives a device other than the CPU "
    "float32 (torch/_decomp/decompositions.py, native_batch_norm_helper)"
)
# The ops whose results hold those statistics at positions 1 and 2 (the CPU's kernels return them so).
BATCH_NORM_OPS = (
    "aten::native_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_batch_norm_with_update",
    "aten::_batch_norm_no_update",
)

# Layer norm follows the same convention (torch/_refs/__init__.py, `native_layer_norm`, torch 2.13: mean and rstd
# go back to the input's dtype only `if input.device.type in ["cpu", "mtia"]`), with the statistics at the same
# positions of its forward's results; its backward takes them at positions 3 and 4.
LAYER_NORM_STATS = (
    "the surrogate's eager layer norm is the CPU's kernel, which gives mean and rstd of a float16 or bfloat16 input "
    "in that dtype; upstream's reference gives a device other than the CPU float32 (torch/_refs/__init__.py, "
    "native_layer_norm)"
)
LAYER_NORM_OPS = ("aten::native_layer_norm",)

ERF = (
    "torch_npu computes erf as AscendC's Pade form on purpose (torch_npu/_inductor/decomposition.py, `erf`: "
    '"Match AscendC ErfImpl": clipped to +-3.92, P(x)/Q(x)); the surrogate\'s eager erf is the CPU\'s exact one'
)


def _stats_in_float32(op: Any, args: tuple, kwargs: dict) -> Any:
    result = op(*args, **kwargs)
    source = args[0] if args else kwargs.get("input")
    if not isinstance(source, torch.Tensor) or source.dtype not in LOW_PRECISION:
        return result
    return tuple(
        r.float() if position in (1, 2) and isinstance(r, torch.Tensor) and r.dtype in LOW_PRECISION else r
        for position, r in enumerate(result)
    )


# Their backward kernels on the CPU take the statistics in the input's dtype: given float32 ones (the forms above),
# they get them back in that dtype, as the CPU's forward gave them.
BATCH_NORM_BACKWARD_OPS = {"aten::native_batch_norm_backward": (5, 6), "aten::batch_norm_backward": (5, 6)}
LAYER_NORM_BACKWARD_OPS = {"aten::native_layer_norm_backward": (3, 4)}
STATS_TAKEN_AT = {**BATCH_NORM_BACKWARD_OPS, **LAYER_NORM_BACKWARD_OPS}


def _stats_in_input_dtype(op: Any, args: tuple, kwargs: dict) -> Any:
    positions = STATS_TAKEN_AT[op._schema.name]
    source = args[1] if len(args) > 1 else None
    if not isinstance(source, torch.Tensor) or source.dtype not in LOW_PRECISION:
        return op(*args, **kwargs)
    given = [
        a.to(source.dtype) if i in positions and isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
        for i, a in enumerate(args)
    ]
    return op(*given, **kwargs)


def _torch_npus_erf() -> Callable[..., Any] | None:
    """The erf decomposition torch_npu's loaded backend registered in Inductor's table, where it is torch_npu's."""
    import torch_npu
    from torch._inductor.decomposition import select_decomp_table

    erf = select_decomp_table().get(torch.ops.aten.erf.default)
    code = getattr(erf, "__code__", None)
    folders = tuple(os.path.abspath(p) + os.sep for p in getattr(torch_npu, "__path__", ()))
    if code is None or not os.path.abspath(code.co_filename).startswith(folders):
        return None
    return erf


def _erf_as_torch_npu(op: Any, args: tuple, kwargs: dict) -> Any:
    erf = _torch_npus_erf()
    return erf(*args, **kwargs) if erf is not None else op(*args, **kwargs)


def gaps(wheel: bool) -> dict[str, tuple[Callable[..., Any], str]]:
    """The gaps of this surrogate's mode: the batch and layer norm statistics' dtype in every mode (upstream's
    decompositions); erf's form only where torch_npu's own compiler runs (`wheel`)."""
    found = {name: (_stats_in_float32, BATCH_NORM_STATS) for name in BATCH_NORM_OPS}
    found.update({name: (_stats_in_input_dtype, BATCH_NORM_STATS) for name in BATCH_NORM_BACKWARD_OPS})
    found.update({name: (_stats_in_float32, LAYER_NORM_STATS) for name in LAYER_NORM_OPS})
    found.update({name: (_stats_in_input_dtype, LAYER_NORM_STATS) for name in LAYER_NORM_BACKWARD_OPS})
    if wheel:
        found["aten::erf"] = (_erf_as_torch_npu, ERF)
    return found
