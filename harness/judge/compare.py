"""Element-by-element comparison of a compiled result with its eager twin: the verdict policy.

One policy decides every verdict the harness gives, for a case's outputs and
for the buffers the probe compares inside a run (`VerdictPolicy`):

1. Non-finite values first: NaN, +inf and -inf must sit at the same positions
   (for complex values, in both parts), or the result fails whatever rule
   decides the finite part. One exception, decided by a float64 reference:
   where eager alone is NaN or inf, float64 (rounded to the dtype) is finite
   and compiled matches it within tolerance, and every other element meets
   its tolerance (or passes rule 3: the intermediate that overflowed rounds
   them too), eager's own arithmetic overflowed (an intermediate in float16
   that compiled code keeps in float32): a pass, with a note. Where both
   sides are non-finite of another kind and float64 has no value either
   (`differs_only_where_undefined`), the result fails here; the runner
   skips such a generated sample and warns on a hand-written case.
2. Integers and bool must match exactly; floating and complex values get
   `torch.testing.assert_close`'s tolerance for their dtype (complex: the
   magnitude of the difference, with the tolerance of the real dtype).
3. A floating result that misses the tolerance still passes when its error
   against a float64 reference is within a small multiple of eager's own
   error (torchbench's RMSE rule), unless `strict_eager` asks for eager's
   dtype semantics. Such a pass carries a note: it differs from eager.
   Two eager runs of one program (is eager a reference at all?) have no
   float64 to ask: their difference passes when it is within the rounding
   noise of a long float sum (the RMSE floor below), what atomic adds in
   another order leave; a random op or a read of unwritten memory is far
   beyond it.
4. Non-tensor leaves (int, float, bool, str, None) must be equal; a result
   present on one side only fails.

Metrics are computed in float64 (integers up to 2**53 exactly, which covers
every index tensor a kernel can address) on the tensors' device, or on the
host for a device without float64 of its own (the NPU: `Device.float64_device`),
then leave as plain numbers in an `OutputComparison`; nothing downstream sees
a tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from harness.devices import float64_home
from harness.layout import dtype_name, dtype_named
from harness.records import (
    PASSED_BY_COSINE,
    PASSED_BY_EAGER_NONFINITE,
    PASSED_BY_LOW_PRECISION_ATOMICS,
    PASSED_BY_RMSE,
    PASSED_BY_SUMMATION_NOISE,
    ErrorHistogram,
    MismatchMap,
    OutputComparison,
    Sample,
)
from harness.judge.tolerances import (
    DEFAULT_TOLERANCES,
    FLOAT8_DTYPES,
    RMSE_FLOOR_ULPS,
    Tolerance,
    is_exact_dtype,
    rmse_floor,
    rmse_multiplier,
    tolerance_for,
)

MAX_SAMPLES = 5
COSINE_THRESHOLD = 0.99  # torch._dynamo.utils.same with cos_similarity=True
MAP_CELLS = 64
# A 1-D result is drawn as a square grid of this many columns, not as one unreadable strip.
MAP_COLUMNS_1D = 64
HISTOGRAM_MAX_BINS = 24
# Python floats usually come from `.item()` of a float32 tensor: they get float32's tolerance.
PYTHON_FLOAT_TOLERANCE = DEFAULT_TOLERANCES[torch.float32]


@dataclass(frozen=True)
class VerdictPolicy:
    """The verdict policy: the same rules for outputs, gradients, mutated inputs and probed buffers."""

    tolerances: Mapping[torch.dtype, Tolerance] = field(default_factory=dict)
    # torchbench's last resort: a float result failing tolerance and the RMSE
    # rule still passes with cosine similarity >= 0.99 (off unless a case asks).
    cosine_fallback: bool = False
    # Eager's dtype semantics are the contract: no pass by being closer to float64.
    strict_eager: bool = False
    # Whether a float64 reference may decide a float result that misses its tolerance (a case's `reference`).
    use_reference: bool = True
    # Whether the result was summed from many terms (tolerances.RMSE_FLOOR_ULPS): the compiled program
    # accumulates, for outputs; the buffer's own kernel does, for the probe.
    accumulated: bool = True
    # Both sides are eager runs of one program (rule 3's last sentence).
    eager_repeat: bool = False
    # Result name -> the elements a colliding write's winner decides (colliding_writes): not compared.
    undefined: Mapping[str, torch.Tensor] = field(default_factory=dict)
    # Result name -> eager's result with its float16/bfloat16 scatter sums made one add at a time in that
    # dtype (colliding_writes.LowPrecisionSums), for a program that adds atomically in low precision: rule 3's
    # baseline may be its error instead of eager's.
    atomic_baseline: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def tensors(
        self,
        name: str,
        actual: torch.Tensor,
        expected: torch.Tensor,
        reference: torch.Tensor | None = None,
        pictures: bool = True,
    ) -> OutputComparison:
        """`pictures=False`: the verdict and its counts only (no samples, map or histogram), for a comparison
        no record shows (the probe's replays): on large buffers the pictures cost as much as the verdict."""
        return compare_tensors(
            name,
            actual,
            expected,
            tolerances=self.tolerances,
            reference=reference,
            cosine_fallback=self.cosine_fallback,
            strict_eager=self.strict_eager,
            accumulated=self.accumulated,
            pictures=pictures,
            eager_repeat=self.eager_repeat,
            atomic_baseline=self.atomic_baseline.get(name),
        )

    def values(self, name: str, actual: Any, expected: Any, reference: Any = None) -> OutputComparison:
        """Any pair of results: tensors by the tensor rules, other leaves by equality."""
        if isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor):
            reference = reference if isinstance(reference, torch.Tensor) else None
            mask = self.undefined.get(name)
            if mask is None or not actual.shape == expected.shape == mask.shape or actual.dtype != expected.dtype:
                return self.tensors(name, actual, expected, reference)
            # Eager's value stands in on both sides where it is undefined: those elements agree by construction.
            mask = mask.to(expected.device)
            actual = torch.where(mask, expected, actual.to(expected.device))
            if reference is not None and reference.shape == mask.shape:
                reference = torch.where(mask.to(reference.device), expected.to(reference), reference)
            comparison = self.tensors(name, actual, expected, reference)
            comparison.undefined = int(mask.sum().item())
            said = (
                f"{comparison.undefined} elements left out: their value depends on which of several writes to "
                "one element wins (indices that repeat), which is undefined"
            )
            comparison.note = f"{comparison.note}; {said}" if comparison.note else said
            return comparison
        return compare_leaves(name, actual, expected)

    def quick_match(self, actual: torch.Tensor, expected: torch.Tensor) -> bool:
        """True when the full comparison would pass by tolerance alone; cheap, for the probe's many buffers."""
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            return False
        if is_exact_dtype(expected.dtype):
            return bool(torch.equal(actual, expected))
        tol = tolerance_for(expected.dtype, self.tolerances)
        if expected.dtype in FLOAT8_DTYPES:  # (no arithmetic on float8: compared through float32, exactly)
            actual, expected = actual.float(), expected.float()
        return bool(torch.isclose(actual, expected, rtol=tol.rtol, atol=tol.atol, equal_nan=True).all())

    def wants_reference(self, comparison: OutputComparison) -> bool:
        """Whether a float64 reference could still turn this failure into a pass."""
        # A NaN or inf mismatch only where eager alone is non-finite: eager may have overflowed (rule 1).
        return (
            self.use_reference
            and not comparison.passed
            and comparison.rule == "tolerance"
            and comparison.nan_mismatch + comparison.inf_mismatch == comparison.eager_nonfinite
        )


def compare_tensors(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    tolerances: Mapping[torch.dtype, Tolerance] | None = None,
    reference: torch.Tensor | None = None,
    cosine_fallback: bool = False,
    strict_eager: bool = False,
    accumulated: bool = True,
    pictures: bool = True,
    eager_repeat: bool = False,
    atomic_baseline: torch.Tensor | None = None,
) -> OutputComparison:
    """Compare `actual` (compiled) with `expected` (eager) under the verdict policy (module docstring)."""
    if expected.dtype in FLOAT8_DTYPES or actual.dtype in FLOAT8_DTYPES:
        # torch has almost no arithmetic on float8 (not even isfinite): its values are compared through float32,
        # which holds every one of them exactly, under float8's own tolerance.
        own = tolerance_for(expected.dtype, tolerances)
        result = compare_tensors(
            name,
            actual.float(),
            expected.float(),
            tolerances={torch.float32: own},
            reference=reference.float() if reference is not None and reference.dtype in FLOAT8_DTYPES else reference,
            cosine_fallback=cosine_fallback,
            strict_eager=strict_eager,
            accumulated=accumulated,
            pictures=pictures,
            eager_repeat=eager_repeat,
            atomic_baseline=atomic_baseline,
        )
        result.dtype = dtype_name(expected.dtype)
        if actual.dtype != expected.dtype:
            result.layout_notes.append(f"dtype {dtype_name(actual.dtype)} != {dtype_name(expected.dtype)}")
            result.passed = False
        return result
    tol = tolerance_for(_real_dtype(expected.dtype), tolerances)
    notes: list[str] = []
    if actual.shape != expected.shape:
        notes.append(f"shape {tuple(actual.shape)} != {tuple(expected.shape)}")
        return OutputComparison(
            name=name,
            dtype=dtype_name(expected.dtype),
            shape=list(expected.shape),
            numel=expected.numel(),
            bad=expected.numel(),
            bad_pct=100.0,
            max_abs=math.inf,
            max_rel=math.inf,
            passed=False,
            rule="shape",
            rtol=tol.rtol,
            atol=tol.atol,
            layout_notes=notes,
        )
    dtype_ok = actual.dtype == expected.dtype
    if not dtype_ok:
        notes.append(f"dtype {dtype_name(actual.dtype)} != {dtype_name(expected.dtype)}")
    if expected.dim() and actual.numel() > 1 and actual.stride() != expected.stride():
        notes.append(f"stride {tuple(actual.stride())} != {tuple(expected.stride())}")

    exact = is_exact_dtype(expected.dtype) and not actual.is_complex()
    if dtype_ok and expected.numel() and _bit_identical(actual, expected):
        return _identical(name, expected, tol, exact, list(actual.stride()), notes)
    actual, expected, reference = _where_float64_runs(actual, expected, reference)
    wide = torch.complex128 if (expected.is_complex() or actual.is_complex()) else torch.float64
    a = actual.detach().to(device=expected.device, dtype=wide)
    e = expected.detach().to(wide)
    both_finite = _all_finite(a) & _all_finite(e)
    all_finite = bool(both_finite.all())
    # |a - e| over elements finite on both sides; matching NaN or inf counts as no difference, and a
    # non-finite mismatch is counted by its own mask (and makes max_abs infinite below).
    abs_diff = (a - e).abs()
    if not all_finite:
        abs_diff = torch.where(both_finite, abs_diff, torch.zeros((), dtype=torch.float64, device=a.device))
    if exact:
        bad_mask = actual.detach().to(expected.device) != expected.detach()
    elif a.is_complex():
        bad_mask = ~torch.isclose(a, e, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    else:
        # torch.isclose's rule for finite values (|a - e| <= atol + rtol |e|), on the difference already
        # computed; non-finite elements are judged by the masks below (equal infs and NaN pairs agree).
        bad_mask = abs_diff > tol.atol + tol.rtol * e.abs()
    if all_finite:
        nan_mask = inf_mask = torch.zeros_like(bad_mask)
    else:
        nan_mask, inf_mask = _nonfinite_mismatches(a, e)
        bad_mask = bad_mask | nan_mask | inf_mask
        eager_only_nonfinite = (nan_mask | inf_mask) & _all_finite(a) & ~_all_finite(e)
    rel_diff = abs_diff / e.abs()
    rel_diff = torch.where((abs_diff == 0) | rel_diff.isnan(), torch.zeros_like(rel_diff), rel_diff)

    numel = expected.numel()
    bad = int(bad_mask.sum().item())
    result = OutputComparison(
        name=name,
        dtype=dtype_name(expected.dtype),
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
        nan_mismatch=int(nan_mask.sum().item()),
        inf_mismatch=int(inf_mask.sum().item()),
        eager_nonfinite=0 if all_finite else int(eager_only_nonfinite.sum().item()),
        stride_actual=list(actual.stride()),
        stride_expected=list(expected.stride()),
        layout_notes=notes,
    )
    if numel == 0:
        return result
    nonfinite = nan_mask | inf_mask
    if result.nan_mismatch or result.inf_mismatch:
        # A NaN or an inf where the other side has something else is infinitely off.
        first = _unravel(int(nonfinite.reshape(-1).nonzero()[0, 0].item()), expected.shape)
        result.max_abs = result.max_rel = math.inf
        result.max_abs_index = result.max_rel_index = first
        result.cosine = math.nan
    else:
        result.max_abs, result.max_abs_index = _max_with_index(abs_diff, expected.shape)
        result.max_rel, result.max_rel_index = _max_with_index(rel_diff, expected.shape)
        result.cosine = _cosine(a, e, None if all_finite else both_finite)
        if not exact and result.cosine is not None and _below(a, e, tol.atol, None if all_finite else both_finite):
            # Both sides are noise below the absolute tolerance (a gradient that is zero in exact arithmetic,
            # Longformer's key bias): the angle between two noise vectors says nothing of either.
            result.cosine = None
    result.actual_max = _finite_max(a, all_finite)
    result.expected_max = _finite_max(e, all_finite)
    if bad and pictures:
        result.samples = _samples(bad_mask, actual, expected)
        result.mismatch_map = _mismatch_map(bad_mask)
        result.error_histogram = _error_histogram(abs_diff)
    if result.nan_mismatch or result.inf_mismatch:
        if (
            dtype_ok
            and not exact
            and reference is not None
            and result.nan_mismatch + result.inf_mismatch == result.eager_nonfinite
        ):
            _apply_eager_nonfinite_rule(
                result, a, e, reference, tol, bad_mask, eager_only_nonfinite, strict_eager, accumulated
            )
        return result
    if not dtype_ok or exact or result.passed:
        return result
    if reference is not None:
        _apply_rmse_rule(result, a, e, reference, strict_eager, accumulated)
        if not result.passed and atomic_baseline is not None and not strict_eager:
            _apply_atomic_rounding_rule(result, a, reference, atomic_baseline)
    elif eager_repeat:
        _apply_eager_repeat_rule(result, a, e)
    if not result.passed and cosine_fallback and not strict_eager:
        result.rule, result.passed = "cosine", (result.cosine or 0.0) >= COSINE_THRESHOLD
        if result.passed:
            result.passed_by = PASSED_BY_COSINE
            result.note = f"differs from eager beyond tolerance in {bad} elements; passed by cosine similarity"
    return result


def _where_float64_runs(
    actual: torch.Tensor, expected: torch.Tensor, reference: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The three tensors on the device where float64 arithmetic for `expected`'s device runs (module
    docstring): the NPU's results are brought to the host, where its float64 reference was made."""
    home = float64_home(expected.device)
    return (actual.to(home), expected.to(home), None if reference is None else reference.to(home))


def _bit_identical(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal in every element (NaN never is): the cheap answer most runs get. False where `torch.equal`
    has no kernel for the dtype (complex32 on CPU): the full comparison decides."""
    try:
        return bool(torch.equal(actual.detach(), expected.detach()))
    except (NotImplementedError, RuntimeError):
        return False


def _identical(
    name: str, expected: torch.Tensor, tol: Tolerance, exact: bool, stride_actual: list[int], notes: list[str]
) -> OutputComparison:
    """Bit-identical results (no NaN: NaN != NaN), judged without widening: the common case, and for large
    outputs the full path's float64 copies and masks cost more than running the case."""
    origin = [0] * expected.dim()
    largest = _finite_max(expected.detach())
    return OutputComparison(
        name=name,
        dtype=dtype_name(expected.dtype),
        shape=list(expected.shape),
        numel=expected.numel(),
        bad=0,
        bad_pct=0.0,
        max_abs=0.0,
        max_rel=0.0,
        passed=True,
        rule="exact" if exact else "tolerance",
        rtol=tol.rtol,
        atol=tol.atol,
        nan_mismatch=0,
        inf_mismatch=0,
        stride_actual=stride_actual,
        stride_expected=list(expected.stride()),
        layout_notes=notes,
        max_abs_index=origin,
        max_rel_index=origin,
        cosine=1.0,
        actual_max=largest,
        expected_max=largest,
    )


def compare_leaves(name: str, actual: Any, expected: Any) -> OutputComparison:
    """Non-tensor results (int, float, bool, str, None, or a tensor against a non-tensor): equal or not."""
    passed, max_abs = _leaves_equal(actual, expected)
    kind = type(expected).__name__
    result = OutputComparison(
        name=name,
        dtype=kind,
        shape=[],
        numel=1,
        bad=0 if passed else 1,
        bad_pct=0.0 if passed else 100.0,
        max_abs=max_abs,
        max_rel=0.0,
        passed=passed,
        rule="equal",
    )
    if type(actual) is not type(expected):
        result.layout_notes.append(f"type {type(actual).__name__} != {kind}")
    if isinstance(expected, float) and not isinstance(actual, bool):
        result.rtol, result.atol = PYTHON_FLOAT_TOLERANCE.rtol, PYTHON_FLOAT_TOLERANCE.atol
    if not passed:
        result.samples = [Sample(index=[], actual=_plain(actual), expected=_plain(expected))]
    return result


def missing_result(name: str, present_on: str, value: Any) -> OutputComparison:
    """A result one side produced and the other did not (an output, a gradient, a leaf)."""
    shape = list(value.shape) if isinstance(value, torch.Tensor) else []
    numel = value.numel() if isinstance(value, torch.Tensor) else 1
    dtype = dtype_name(value.dtype) if isinstance(value, torch.Tensor) else type(value).__name__
    return OutputComparison(
        name=name,
        dtype=dtype,
        shape=shape,
        numel=numel,
        bad=numel,
        bad_pct=100.0,
        max_abs=math.inf,
        max_rel=math.inf,
        passed=False,
        rule="missing",
        layout_notes=[f"only {present_on} produced it"],
    )


def _leaves_equal(actual: Any, expected: Any) -> tuple[bool, float]:
    """(equal, |difference|): same type, and the same value (Python floats within float32's tolerance)."""
    if type(actual) is not type(expected):
        return False, math.inf
    if isinstance(expected, float):
        if math.isnan(actual) or math.isnan(expected):
            both = math.isnan(actual) and math.isnan(expected)
            return both, 0.0 if both else math.inf
        if math.isinf(actual) or math.isinf(expected):
            return actual == expected, 0.0 if actual == expected else math.inf
        close = math.isclose(actual, expected, rel_tol=PYTHON_FLOAT_TOLERANCE.rtol, abs_tol=PYTHON_FLOAT_TOLERANCE.atol)
        return close, abs(actual - expected)
    if isinstance(expected, int) and not isinstance(expected, bool):
        return actual == expected, float(abs(actual - expected))
    try:
        return bool(actual == expected), 0.0 if actual == expected else math.inf
    except Exception:  # an object whose == is not a truth value
        return repr(actual) == repr(expected), 0.0


def _plain(value: Any) -> Any:
    """A JSON-able stand-in for a sample value: numbers as they are, anything else as its repr."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, complex):
        return repr(value)
    return repr(value)


def _real_dtype(dtype: torch.dtype) -> torch.dtype:
    # Complex tolerances are those of their parts' dtype (torch.testing does the same).
    return {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}.get(
        dtype, dtype
    )


def _all_finite(x: torch.Tensor) -> torch.Tensor:
    return x.isfinite() if not x.is_complex() else (x.real.isfinite() & x.imag.isfinite())


def _parts(x: torch.Tensor) -> torch.Tensor:
    """A trailing dimension of parts: (real, imag) for complex values, the value itself otherwise."""
    return torch.view_as_real(x) if x.is_complex() else x.unsqueeze(-1)


def _nonfinite_mismatches(a: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Elements whose NaN positions differ, and elements with an inf on either side that is not the same inf."""
    pa, pe = _parts(a), _parts(e)
    nan_mismatch = (pa.isnan() != pe.isnan()).any(-1)
    inf_mismatch = ((pa.isinf() | pe.isinf()) & (pa != pe) & ~pa.isnan() & ~pe.isnan()).any(-1)
    return nan_mismatch, inf_mismatch & ~nan_mismatch


def _apply_rmse_rule(
    result: OutputComparison,
    actual: torch.Tensor,
    expected: torch.Tensor,
    reference: torch.Tensor,
    strict_eager: bool,
    accumulated: bool,
) -> None:
    """torchbench's rule: pass when compiled is no further from fp64 than eager is (times a multiplier)."""
    ref = reference.detach().to(device=expected.device, dtype=expected.dtype)
    if ref.shape != expected.shape:
        return
    rmse_actual = _rmse(actual, ref)
    rmse_expected = _rmse(expected, ref)
    dtype = dtype_named(result.dtype)
    multiplier = rmse_multiplier(dtype, result.numel)
    result.rmse_actual, result.rmse_expected, result.rmse_multiplier = rmse_actual, rmse_expected, multiplier
    result.rule = "rmse_vs_fp64"
    # torchbench's slack is tol / 10; here the absolute tolerance in force plays tol.
    floor = rmse_floor(dtype, _rms(ref)) if accumulated else 0.0
    result.rmse_floor = floor if accumulated else None
    slack = result.atol / 10
    closer = rmse_actual <= multiplier * rmse_expected + slack
    noise = not closer and rmse_actual <= floor + slack
    why = (
        "closer to float64"
        if closer
        else f"within float32 summation noise of float64 ({RMSE_FLOOR_ULPS} ulps RMS; eager's own error is smaller)"
    )
    if (closer or noise) and strict_eager:
        result.note = (
            f"differs from eager beyond tolerance in {result.bad} elements; {why}, "
            "but eager's dtype semantics are required (strict eager)"
        )
        return
    result.passed = closer or noise
    if result.passed:
        result.passed_by = PASSED_BY_RMSE if closer else PASSED_BY_SUMMATION_NOISE
        result.note = f"differs from eager beyond tolerance in {result.bad} elements; {why}"


def _apply_atomic_rounding_rule(
    result: OutputComparison, actual: torch.Tensor, reference: torch.Tensor, baseline: torch.Tensor
) -> None:
    """Rule 3 with another baseline, for a program that adds atomically in float16/bfloat16: a pass when
    compiled is no further from float64 than eager is with its scatter sums made one add at a time in that
    dtype (times the same multiplier): every such add rounds, in whatever order the atomics land."""
    ref = reference.detach().to(device=actual.device, dtype=torch.float64)
    base = baseline.detach().to(device=actual.device, dtype=torch.float64)
    if ref.shape != actual.shape or base.shape != actual.shape or result.rmse_actual is None:
        return
    rmse_baseline = result.rmse_low_precision_sums = _rmse(base, ref)
    multiplier = result.rmse_multiplier or rmse_multiplier(dtype_named(result.dtype), result.numel)
    if result.rmse_actual <= multiplier * rmse_baseline + result.atol / 10:
        result.passed, result.passed_by = True, PASSED_BY_LOW_PRECISION_ATOMICS
        result.note = (
            f"differs from eager beyond tolerance in {result.bad} elements; within the rounding of the "
            f"program's low-precision atomic adds (RMSE against float64 {result.rmse_actual:.3g}, eager "
            f"with each such sum made one add at a time in its dtype {rmse_baseline:.3g})"
        )


def _apply_eager_repeat_rule(result: OutputComparison, again: torch.Tensor, first: torch.Tensor) -> None:
    """Two eager runs: a pass when their RMS difference is within the RMSE floor of the first run's values, the
    rounding of a long float sum (module docstring, rule 3): the order of the additions changed, not the result."""
    floor = rmse_floor(dtype_named(result.dtype), _rms(first))
    difference = _rmse(again, first)
    if difference <= floor + result.atol / 10:
        result.passed, result.passed_by = True, PASSED_BY_SUMMATION_NOISE
        result.note = (
            f"two eager runs differ beyond tolerance in {result.bad} elements, within float summation "
            f"noise (RMS difference {difference:.3g}, floor {floor:.3g})"
        )


def _apply_eager_nonfinite_rule(
    result: OutputComparison,
    actual: torch.Tensor,
    expected: torch.Tensor,
    reference: torch.Tensor,
    tol: Tolerance,
    bad_mask: torch.Tensor,
    eager_only: torch.Tensor,
    strict_eager: bool,
    accumulated: bool,
) -> None:
    """Where eager alone is NaN or inf: a pass when float64, rounded to the dtype, is finite there and compiled
    matches it, and every other element meets its tolerance or, judged as any finite result is, rule 3
    (module docstring, rule 1)."""
    if reference.shape != actual.shape or actual.is_complex() or reference.is_complex():
        return
    dtype = dtype_named(result.dtype)
    reference = reference.detach().to(device=actual.device)
    # The true value in eager's dtype: inf where it overflows that dtype, as a correct result would.
    truth = reference.to(dtype).to(actual.dtype)
    matches = _all_finite(truth) & ((actual - truth).abs() <= tol.atol + tol.rtol * truth.abs())
    if bool((eager_only & ~matches).any()):
        return
    count = int(eager_only.sum().item())
    why = (
        f"eager is NaN or inf in {count} element{'s' if count != 1 else ''} where a float64 run of the program, "
        f"rounded to {result.dtype}, is finite, and compiled matches it there: eager's own {result.dtype} "
        "arithmetic overflowed"
    )
    rest = ~eager_only
    if bool((bad_mask & rest).any()):
        # The same low-precision intermediate that overflowed rounds eager's other elements too (tan's gradient
        # in float16: 1 + tan(x)**2): those are judged by float64 as well (the caller saw no other non-finite).
        _apply_rmse_rule(result, actual[rest], expected[rest], reference[rest], strict_eager, accumulated)
        if not result.passed:
            return
        why = f"{why}; {result.note}"
    if strict_eager:
        result.note = f"{why}, but eager's dtype semantics are required (strict eager)"
        return
    result.passed, result.passed_by, result.note = True, PASSED_BY_EAGER_NONFINITE, why


def differs_only_where_undefined(
    actual: Any, expected: Any, reference: Any, tolerances: Mapping[torch.dtype, Tolerance] | None = None
) -> bool:
    """Whether two real float results differ, and only where each side is NaN or inf and float64 has no value
    either: NaN, or an inf `expected` does not match (infinite arithmetic, whose NaN or sign each side's rounding
    decides). Where float64 is an inf eager matches, eager is right and compiled is not. Finite elements within
    their tolerance are no difference."""
    if (
        not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in (actual, expected, reference))
        or not actual.shape == expected.shape == reference.shape
        or actual.dtype != expected.dtype
    ):
        return False  # a result of another dtype (type promotion gone wrong) differs everywhere, not only there
    a, e, r = _where_float64_runs(actual.detach(), expected.detach(), reference.detach())
    tol = tolerance_for(expected.dtype, tolerances)
    nan_mask, inf_mask = _nonfinite_mismatches(a, e)
    finite_mismatch = _all_finite(a) & _all_finite(e) & ~torch.isclose(a, e, rtol=tol.rtol, atol=tol.atol)
    differ = nan_mask | inf_mask | finite_mismatch
    no_value = r.isnan() | (r.isinf() & (e != r))
    return bool(differ.any()) and not bool((differ & ~(~_all_finite(a) & ~_all_finite(e) & no_value)).any())


def _rms(x: torch.Tensor) -> float:
    finite = torch.where(_all_finite(x), x.abs(), torch.zeros((), dtype=torch.float64, device=x.device))
    return math.sqrt(float((finite * finite).mean().item())) if x.numel() else 0.0


def _rmse(x: torch.Tensor, ref: torch.Tensor) -> float:
    both_finite = _all_finite(x) & _all_finite(ref)
    diff = torch.where(both_finite, (x - ref).abs(), torch.zeros((), dtype=torch.float64, device=x.device))
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


# Unsigned types beyond uint8 have almost no kernels (no max, no abs): their magnitudes are read in float64.
_BAREBONES_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def _finite_max(values: torch.Tensor, all_finite: bool = False) -> float | None:
    """The largest finite value (magnitude, for complex values); None when there is none."""
    if values.is_complex():
        values = values.abs()
    if values.dtype in _BAREBONES_UNSIGNED:
        values = values.to(torch.float64)
    if not values.numel():
        return None
    if is_exact_dtype(values.dtype) or all_finite:
        return float(values.max().item())
    finite = values.isfinite()
    if bool(finite.all()):  # the common case, without copying the finite elements out
        return float(values.max().item())
    kept = values[finite]
    return float(kept.max().item()) if kept.numel() else None


def _below(a: torch.Tensor, e: torch.Tensor, atol: float, finite: torch.Tensor | None = None) -> bool:
    """Whether every element of both sides (finite on both) is within `atol` of zero."""
    if finite is not None:
        a, e = a[finite], e[finite]
    a, e = _parts(a).reshape(-1), _parts(e).reshape(-1)
    return a.numel() > 0 and float(a.abs().max()) <= atol and float(e.abs().max()) <= atol


def _cosine(a: torch.Tensor, e: torch.Tensor, finite: torch.Tensor | None = None) -> float | None:
    """Cosine similarity over the elements finite on both sides (`finite`; None: every element is)."""
    if finite is not None:
        a, e = a[finite], e[finite]
    a, e = _parts(a).reshape(-1), _parts(e).reshape(-1)
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
            actual=_plain(flat_actual[p].item()),
            expected=_plain(flat_expected[p].item()),
        )
        for p in positions
    ]


def _mismatch_map(bad_mask: torch.Tensor) -> MismatchMap:
    """Bad elements pooled into at most MAP_CELLS x MAP_CELLS cells, whatever the shape.

    The bound is what keeps a results file small: every failing output (and the kernel the
    probe names) carries a map, and a training run fails hundreds of gradients at once.
    """
    if bad_mask.dim() <= 1:
        # A 1-D result wraps into rows of MAP_COLUMNS_1D, so its map is a picture, not a strip.
        cols = min(MAP_COLUMNS_1D, max(bad_mask.numel(), 1))
    else:
        cols = bad_mask.shape[-1]
    rows = math.ceil(bad_mask.numel() / max(cols, 1))
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
