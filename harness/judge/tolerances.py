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


def _float8_tolerance(dtype: torch.dtype) -> Tolerance:
    """torch.testing has no entry for float8 (it compares them exactly), yet a compiled program that rounds a float32
    value once where eager rounded it differently is one float8 step off at a rounding boundary: as the half
    types' entries allow a step or two, one step relative (eps: 0.125 for e4m3, 0.25 for e5m2) and the smallest
    subnormal absolute."""
    info = torch.finfo(dtype)
    return Tolerance(info.eps, info.tiny * info.eps)


# The float8 types this torch has (e4m3fn, e5m2 and their fnuz forms, e8m0fnu), by name: older torch lacks some.
FLOAT8_DTYPES = tuple(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
    if hasattr(torch, name)
)
DEFAULT_TOLERANCES = {**DEFAULT_TOLERANCES, **{d: _float8_tolerance(d) for d in FLOAT8_DTYPES}}

# torchbench's RMSE rule (torch._dynamo.utils.same with an fp64 reference):
# compiled passes when rmse(compiled, fp64) <= multiplier * rmse(eager, fp64) + atol / 10.
# Multipliers as torchbench uses them: 3 for half types, 2 otherwise, 3 for
# tensors under 1000 elements where noise dominates the metric.
RMSE_MULTIPLIER_HALF = 3.0
RMSE_MULTIPLIER = 2.0
RMSE_SMALL_TENSOR_NUMEL = 1000
# Eager's reductions (cascade sums, float64 accumulation for some ops) can be far more accurate than a
# plain float32 sum, so "within a multiple of eager's error" alone fails correct compiled reductions
# (a 600-term gradient sum: 25x eager's error, 42 float32 ulps). A result also passes when its RMS
# error against float64 is within this many units of float32 roundoff (float64's for float64),
# relative to the RMS of the reference: the noise of summing thousands of terms one after another
# (about sqrt(n) ulps). Half types accumulate in float32 as well; their own rounding dominates.
# Elementwise programs get no such floor: an elementwise op 60 ulps off (erfinv) is a precision bug.
RMSE_FLOOR_ULPS = 128


def is_exact_dtype(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def tolerance_for(dtype: torch.dtype, overrides: Mapping[torch.dtype, Tolerance] | None = None) -> Tolerance:
    """Case override first, then the table; integers and bool are exact."""
    if overrides and dtype in overrides:
        return overrides[dtype]
    if is_exact_dtype(dtype):
        return EXACT
    return DEFAULT_TOLERANCES[dtype]


def rmse_floor(dtype: torch.dtype, reference_rms: float) -> float:
    """The RMS error a correct float computation of this dtype may have whatever eager's own error."""
    accumulation = torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32
    return RMSE_FLOOR_ULPS * torch.finfo(accumulation).eps * reference_rms


def rmse_multiplier(dtype: torch.dtype, numel: int) -> float:
    if dtype in (torch.float16, torch.bfloat16, *FLOAT8_DTYPES) or numel < RMSE_SMALL_TENSOR_NUMEL:
        return RMSE_MULTIPLIER_HALF
    return RMSE_MULTIPLIER
