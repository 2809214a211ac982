"""Element-by-element comparison of a compiled tensor with its eager twin.

Metrics are computed on the tensors' device in float64 (integers up to 2**53
exactly, which covers every index tensor a kernel can address), then leave as
plain numbers in an `OutputComparison`; nothing downstream sees a tensor.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from .records import ErrorHistogram, MismatchMap, OutputComparison, Sample
from .tolerances import Tolerance, is_exact_dtype, rmse_multiplier, tolerance_for

MAX_SAMPLES = 5
COSINE_THRESHOLD = 0.99  # torch._dynamo.utils.same with cos_similarity=True
MAP_CELLS = 64
HISTOGRAM_MAX_BINS = 24


def compare_tensors(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    tolerances: Mapping[torch.dtype, Tolerance] | None = None,
    reference: torch.Tensor | None = None,
    cosine_fallback: bool = False,
) -> OutputComparison:
    """Compare `actual` (compiled) with `expected` (eager).

    `reference`, when given, is the same output computed in float64; it lets a
    floating output that misses the tolerance pass by torchbench's RMSE rule.
    With `cosine_fallback`, one that still fails passes at cosine similarity
    >= 0.99 (torchbench's `cos_similarity` mode).
    """
    tol = tolerance_for(expected.dtype, tolerances)
    notes: list[str] = []
    if actual.shape != expected.shape:
        notes.append(f"shape {tuple(actual.shape)} != {tuple(expected.shape)}")
        return OutputComparison(
            name=name, dtype=_dtype_name(expected.dtype), shape=list(expected.shape),
            numel=expected.numel(), bad=expected.numel(), bad_pct=100.0,
            max_abs=math.inf, max_rel=math.inf, passed=False, rule="shape",
            rtol=tol.rtol, atol=tol.atol, layout_notes=notes,
        )
    dtype_ok = actual.dtype == expected.dtype
    if not dtype_ok:
        notes.append(f"dtype {_dtype_name(actual.dtype)} != {_dtype_name(expected.dtype)}")
    if expected.dim() and actual.numel() > 1 and actual.stride() != expected.stride():
        notes.append(f"stride {tuple(actual.stride())} != {tuple(expected.stride())}")

    exact = is_exact_dtype(expected.dtype)
    a = actual.detach().to(device=expected.device, dtype=torch.float64)
    e = expected.detach().to(torch.float64)
    if exact:
        bad_mask = actual.detach().to(expected.device) != expected.detach()
    else:
        bad_mask = ~torch.isclose(a, e, rtol=tol.rtol, atol=tol.atol, equal_nan=True)

    same_nonfinite = (a == e) | (a.isnan() & e.isnan())
    abs_diff = torch.where(same_nonfinite, torch.zeros_like(a), (a - e).abs())
    finite_diff = torch.where(abs_diff.isfinite(), abs_diff, torch.zeros_like(abs_diff))
    rel_diff = finite_diff / e.abs()
    rel_diff = torch.where(finite_diff == 0, torch.zeros_like(rel_diff), rel_diff)
    rel_diff = torch.where(rel_diff.isnan(), torch.zeros_like(rel_diff), rel_diff)

    numel = expected.numel()
    bad = int(bad_mask.sum().item())
    result = OutputComparison(
        name=name,
        dtype=_dtype_name(expected.dtype),
        shape=list(expected.shape),
        numel=numel,
        bad=bad,
        bad_pct=100.0 * bad / numel if numel else 0.0,
        max_abs=0.0,
        max_rel=0.0,
        passed=bad == 0 and dtype_ok,
        rule="exact" if exact else "tolerance",
        rtol=tol.rtol,
        atol=tol.atol,
        nan_mismatch=int((a.isnan() ^ e.isnan()).sum().item()),
        inf_mismatch=int(((a.isinf() | e.isinf()) & ~same_nonfinite & ~a.isnan() & ~e.isnan()).sum().item()),
        stride_actual=list(actual.stride()),
        stride_expected=list(expected.stride()),
        layout_notes=notes,
    )
    if numel == 0:
        return result
    result.max_abs, result.max_abs_index = _max_with_index(finite_diff, expected.shape)
    result.max_rel, result.max_rel_index = _max_with_index(rel_diff, expected.shape)
    result.actual_max = _finite_max(a)
    result.expected_max = _finite_max(e)
    result.cosine = _cosine(a, e)
    if bad:
        result.samples = _samples(bad_mask, actual, expected)
        result.mismatch_map = _mismatch_map(bad_mask)
        result.error_histogram = _error_histogram(finite_diff)
    if not result.passed and dtype_ok and not exact and reference is not None:
        _apply_rmse_rule(result, a, e, reference)
    if not result.passed and dtype_ok and not exact and cosine_fallback and not result.nan_mismatch:
        result.rule, result.passed = "cosine", (result.cosine or 0.0) >= COSINE_THRESHOLD
    return result


def _apply_rmse_rule(result: OutputComparison, actual: torch.Tensor, expected: torch.Tensor, reference: torch.Tensor) -> None:
    """torchbench's rule: pass when compiled is no further from fp64 than eager is (times a multiplier)."""
    ref = reference.detach().to(device=expected.device, dtype=torch.float64)
    if ref.shape != expected.shape or result.nan_mismatch:
        return
    rmse_actual = _rmse(actual, ref)
    rmse_expected = _rmse(expected, ref)
    multiplier = rmse_multiplier(_dtype_from_name(result.dtype), result.numel)
    result.rmse_actual, result.rmse_expected, result.rmse_multiplier = rmse_actual, rmse_expected, multiplier
    result.rule = "rmse_vs_fp64"
    # torchbench's slack is tol / 10; here the absolute tolerance in force plays tol.
    result.passed = rmse_actual <= multiplier * rmse_expected + result.atol / 10


def _rmse(x: torch.Tensor, ref: torch.Tensor) -> float:
    both_finite = x.isfinite() & ref.isfinite()
    diff = torch.where(both_finite, x - ref, torch.zeros_like(x))
    return math.sqrt(float((diff * diff).mean().item()))


def _max_with_index(values: torch.Tensor, shape: torch.Size) -> tuple[float, list[int]]:
    flat = values.reshape(-1)
    position = int(flat.argmax().item())
    return float(flat[position].item()), _unravel(position, shape)


def _unravel(position: int, shape: torch.Size) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(position % size)
        position //= size
    return index[::-1]


def _finite_max(values: torch.Tensor) -> float | None:
    finite = values[values.isfinite()]
    return float(finite.max().item()) if finite.numel() else None


def _cosine(a: torch.Tensor, e: torch.Tensor) -> float | None:
    finite = a.isfinite() & e.isfinite()
    a, e = a[finite], e[finite]
    norms = float(a.norm().item()) * float(e.norm().item())
    if norms == 0.0:
        return 1.0 if bool(torch.equal(a, e)) else 0.0
    return float((a * e).sum().item()) / norms


def _samples(bad_mask: torch.Tensor, actual: torch.Tensor, expected: torch.Tensor) -> list[Sample]:
    positions = bad_mask.reshape(-1).nonzero()[:MAX_SAMPLES, 0].tolist()
    flat_actual = actual.detach().reshape(-1)
    flat_expected = expected.detach().reshape(-1)
    return [
        Sample(
            index=_unravel(p, expected.shape),
            actual=flat_actual[p].item(),
            expected=flat_expected[p].item(),
        )
        for p in positions
    ]


def _mismatch_map(bad_mask: torch.Tensor) -> MismatchMap:
    cols = bad_mask.shape[-1] if bad_mask.dim() else 1
    rows = bad_mask.numel() // max(cols, 1)
    cell_rows = max(1, math.ceil(rows / MAP_CELLS))
    cell_cols = max(1, math.ceil(cols / MAP_CELLS))
    grid_rows = math.ceil(rows / cell_rows)
    grid_cols = math.ceil(cols / cell_cols)
    flat = bad_mask.reshape(-1).nonzero()[:, 0]
    cells = (flat // cols // cell_rows) * grid_cols + (flat % cols) // cell_cols
    counts = torch.bincount(cells, minlength=grid_rows * grid_cols).reshape(grid_rows, grid_cols)
    return MismatchMap(rows=rows, cols=cols, cell_rows=cell_rows, cell_cols=cell_cols, counts=counts.tolist())


def _error_histogram(abs_diff: torch.Tensor) -> ErrorHistogram:
    nonzero = abs_diff[abs_diff > 0]
    zero = abs_diff.numel() - nonzero.numel()
    if not nonzero.numel():
        return ErrorHistogram(edges=[], counts=[], zero=zero)
    logs = nonzero.log10()
    low = math.floor(float(logs.min().item()))
    high = max(low + 1, math.ceil(float(logs.max().item())))
    step = max(1, math.ceil((high - low) / HISTOGRAM_MAX_BINS))
    bins = math.ceil((high - low) / step)
    index = ((logs - low) / step).floor().clamp(0, bins - 1).long()
    counts = torch.bincount(index, minlength=bins)
    edges = [10.0 ** (low + i * step) for i in range(bins + 1)]
    return ErrorHistogram(edges=edges, counts=counts.tolist(), zero=zero)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_from_name(name: str) -> torch.dtype:
    return getattr(torch, name)
