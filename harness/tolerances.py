"""The one tolerance table, and the rules that decide a floating-point verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


EXACT = Tolerance(0.0, 0.0)

# torch.testing.assert_close defaults (torch/testing/_comparison.py,
# `_DTYPE_PRECISIONS`, unchanged from torch 1.12 to 2.13). Integer and bool
# dtypes are absent on purpose: they must match exactly.
DEFAULT_TOLERANCES: Mapping[torch.dtype, Tolerance] = {
    torch.float16: Tolerance(1e-3, 1e-5),
    torch.bfloat16: Tolerance(1.6e-2, 1e-5),
    torch.float32: Tolerance(1.3e-6, 1e-5),
    torch.float64: Tolerance(1e-7, 1e-7),
    torch.complex32: Tolerance(1e-3, 1e-5),
    torch.complex64: Tolerance(1.3e-6, 1e-5),
    torch.complex128: Tolerance(1e-7, 1e-7),
}

# torchbench's RMSE rule (torch._dynamo.utils.same with an fp64 reference):
# compiled passes when rmse(compiled, fp64) <= multiplier * rmse(eager, fp64) + atol / 10.
# Multipliers as torchbench uses them: 3 for half types, 2 otherwise, 3 for
# tensors under 1000 elements where noise dominates the metric.
RMSE_MULTIPLIER_HALF = 3.0
RMSE_MULTIPLIER = 2.0
RMSE_SMALL_TENSOR_NUMEL = 1000


def is_exact_dtype(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def tolerance_for(dtype: torch.dtype, overrides: Mapping[torch.dtype, Tolerance] | None = None) -> Tolerance:
    """Case override first, then the table; integers and bool are exact."""
    if overrides and dtype in overrides:
        return overrides[dtype]
    if is_exact_dtype(dtype):
        return EXACT
    return DEFAULT_TOLERANCES[dtype]


def rmse_multiplier(dtype: torch.dtype, numel: int) -> float:
    if dtype in (torch.float16, torch.bfloat16) or numel < RMSE_SMALL_TENSOR_NUMEL:
        return RMSE_MULTIPLIER_HALF
    return RMSE_MULTIPLIER
