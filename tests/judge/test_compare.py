import json
import math

import pytest
import torch

from harness.judge.compare import compare_tensors
from harness.judge.tolerances import Tolerance

from seed_simulation import eager_index, npu_boundary_downcast_index


def test_seed_figures_from_the_eager_simulation():
    result = compare_tensors("out0", npu_boundary_downcast_index(), eager_index())
    assert (result.bad, result.numel) == (2260992, 2359296)
    assert result.max_abs == 589824
    assert result.actual_max == 589823
    assert result.expected_max == 1179647
    assert result.rule == "exact" and not result.passed
    assert result.summary().startswith("int64 out0: bad=2260992/2359296 (95.8%) max_abs=589824 ")
    assert "out_max=589823" in result.summary()


def test_seed_int32_is_untouched():
    result = compare_tensors("out0", npu_boundary_downcast_index(torch.int32), eager_index(torch.int32))
    assert result.bad == 0 and result.passed and result.max_abs == 0


def test_metrics_on_a_known_tensor():
    expected = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    actual = expected.clone()
    actual[0, 1] = 2.5  # abs 0.5, rel 0.25
    actual[1, 2] = 3.0  # abs 3.0, rel 0.5
    result = compare_tensors("out0", actual, expected)
    assert (result.bad, result.numel) == (2, 6)
    assert result.bad_pct == pytest.approx(100 * 2 / 6)
    assert result.max_abs == 3.0 and result.max_abs_index == [1, 2]
    assert result.max_rel == 0.5 and result.max_rel_index == [1, 2]
    assert [(s.index, s.actual, s.expected) for s in result.samples] == [([0, 1], 2.5, 2.0), ([1, 2], 3.0, 6.0)]
    expected_cos = float(
        torch.nn.functional.cosine_similarity(actual.flatten().double(), expected.flatten().double(), dim=0)
    )
    assert result.cosine == pytest.approx(expected_cos)
    assert result.mismatch_map.counts == [[0, 1, 0], [0, 0, 1]]
    assert sum(result.error_histogram.counts) == 2 and result.error_histogram.zero == 4


def test_nan_and_inf_mismatches_are_counted_apart_and_shown():
    expected = torch.tensor([1.0, float("nan"), float("inf"), 4.0, float("nan")])
    actual = torch.tensor([1.0, float("nan"), 5.0, float("nan"), 2.0])
    result = compare_tensors("out0", actual, expected)
    assert result.bad == 3
    assert result.nan_mismatch == 2
    assert result.inf_mismatch == 1
    # A NaN or inf where the other side has something else is infinitely off, at its first position.
    assert result.max_abs == math.inf and result.max_abs_index == [2]
    assert "nan_mismatch=2 inf_mismatch=1 max_abs=inf" in result.summary()


# At 1.0 the allowed error is atol + rtol; `inside` and `outside` are representable steps on either side.
@pytest.mark.parametrize(
    "dtype, rtol, atol, inside, outside",
    [
        (torch.float16, 1e-3, 1e-5, 2**-10, 2**-9),
        (torch.bfloat16, 1.6e-2, 1e-5, 2**-7, 2**-5),
        (torch.float32, 1.3e-6, 1e-5, 1e-5, 2e-5),
        (torch.float64, 1e-7, 1e-7, 1.5e-7, 3e-7),
    ],
)
def test_tolerance_edges_per_dtype(dtype, rtol, atol, inside, outside):
    expected = torch.ones(4, dtype=dtype)
    passing = compare_tensors("x", expected + inside, expected)
    failing = compare_tensors("x", expected + outside, expected)
    assert passing.passed and passing.bad == 0 and (passing.rtol, passing.atol) == (rtol, atol)
    assert not failing.passed and failing.bad == 4 and failing.rule == "tolerance"


def test_integers_and_bool_are_exact():
    assert not compare_tensors("i", torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3])).passed
    assert compare_tensors("i", torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3])).rule == "exact"
    result = compare_tensors("b", torch.tensor([True, False]), torch.tensor([True, True]))
    assert result.bad == 1 and result.rule == "exact"


def test_case_override_beats_the_table():
    expected = torch.ones(3)
    actual = expected + 5e-3
    assert not compare_tensors("x", actual, expected).passed
    assert compare_tensors("x", actual, expected, tolerances={torch.float32: Tolerance(1e-2, 1e-2)}).passed


def test_shape_dtype_and_stride_differences_are_reported_as_such():
    shape = compare_tensors("x", torch.zeros(2, 3), torch.zeros(3, 2))
    assert shape.rule == "shape" and not shape.passed and "shape (2, 3) != (3, 2)" in shape.layout_notes
    dtype = compare_tensors("x", torch.zeros(3, dtype=torch.float64), torch.zeros(3))
    assert not dtype.passed and "dtype float64 != float32" in dtype.layout_notes
    stride = compare_tensors("x", torch.zeros(3, 2).t(), torch.zeros(2, 3))
    assert stride.passed and "stride (1, 2) != (3, 1)" in stride.layout_notes


def test_rmse_rule_passes_reordering_noise_and_says_so():
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(4096, generator=generator, dtype=torch.float64)
    eager = (reference + 1e-2 * torch.randn(4096, generator=generator, dtype=torch.float64)).to(torch.bfloat16)
    compiled = (reference + 1e-2 * torch.randn(4096, generator=generator, dtype=torch.float64)).to(torch.bfloat16)
    without = compare_tensors("g", compiled, eager)
    assert not without.passed and without.bad > 0
    result = compare_tensors("g", compiled, eager, reference=reference)
    assert result.passed and result.rule == "rmse_vs_fp64" and result.bad == without.bad
    assert result.rmse_actual <= result.rmse_multiplier * result.rmse_expected


def test_rmse_rule_still_fails_a_real_bug():
    generator = torch.Generator().manual_seed(1)
    reference = torch.randn(4096, generator=generator, dtype=torch.float64)
    eager = reference.to(torch.float32)
    compiled = eager.clone()
    compiled[::4] *= -1  # a quarter of the elements wrong: no reordering does this
    result = compare_tensors("g", compiled, eager, reference=reference)
    assert not result.passed and result.rule == "rmse_vs_fp64"


def test_cosine_fallback_only_when_the_case_asks():
    expected = torch.linspace(1, 2, 1000)
    actual = expected * 1.001  # off by 0.1%: beyond fp32 tolerance, cosine 1.0
    assert not compare_tensors("x", actual, expected).passed
    result = compare_tensors("x", actual, expected, cosine_fallback=True)
    assert result.passed and result.rule == "cosine"


# Which rule passed an output that missed its tolerance: known tensors, known answers.
ONES = torch.ones(1000, dtype=torch.float64)


def test_rmse_pass_is_recorded_as_such():
    eager, compiled = (ONES + 1e-3).float(), (ONES + 1e-4).float()  # compiled is 10x closer to float64
    result = compare_tensors("out0", compiled, eager, reference=ONES)
    assert result.passed and result.bad == 1000 and result.rule == "rmse_vs_fp64"
    assert result.passed_by == "rmse_vs_fp64"
    assert result.rmse_actual == pytest.approx(1e-4, rel=1e-3) and result.rmse_expected == pytest.approx(1e-3, rel=1e-3)


def test_summation_noise_pass_is_told_apart_from_an_rmse_pass():
    # Eager is exact; compiled is 101 float32 ulps off everywhere: beyond tolerance (1.13e-5 at 1.0), farther
    # from float64 than eager, but within 128 ulps of the reference's RMS (the noise of a float32 sum).
    eager, compiled = ONES.float(), (ONES + 101 * 2**-23).float()
    result = compare_tensors("out0", compiled, eager, reference=ONES)
    assert result.passed and result.bad == 1000 and result.rule == "rmse_vs_fp64"
    assert result.passed_by == "summation_noise"
    assert result.rmse_floor == pytest.approx(128 * 2**-23)
    # A program that does not sum gets no floor, and fails.
    strict = compare_tensors("out0", compiled, eager, reference=ONES, accumulated=False)
    assert not strict.passed and strict.passed_by is None and strict.rmse_floor is None


def test_two_eager_runs_that_differ_by_summation_order_pass_and_a_random_difference_does_not():
    # Ten of 1000 elements 1e-4 apart (beyond tolerance at 1.0): RMS difference 1e-4 * sqrt(10 / 1000) = 1e-5,
    # within 128 float32 ulps of the values' RMS (1.53e-5), what atomic adds summed in another order leave.
    first = ONES.float()
    again = first.clone()
    again[:10] += 1e-4
    assert not compare_tensors("grad.bias", again, first).passed  # compiled against eager: no floor
    repeat = compare_tensors("grad.bias", again, first, eager_repeat=True)
    assert repeat.passed and repeat.bad == 10 and repeat.passed_by == "summation_noise"
    assert "two eager runs differ beyond tolerance in 10 elements" in repeat.note
    # A hundred such elements: RMS difference 3.16e-5, beyond the floor (a random op, unwritten memory).
    again[:100] += 1e-4
    assert not compare_tensors("grad.bias", again, first, eager_repeat=True).passed


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    "compiled, eager, reference, undefined",
    [
        ([1.0, -INF, INF], [1.0, NAN, NAN], [1.0, NAN, -INF], True),  # float64 NaN, or an inf eager misses
        ([1.0, NAN], [1.0, -INF], [1.0, -INF], False),  # eager matches float64's -inf: judged
        ([1.0, 5.0], [1.0, NAN], [1.0, NAN], False),  # a finite value against NaN: judged
        ([2.0, -INF], [1.0, NAN], [1.0, NAN], False),  # a finite element differs too
        ([1.000001, -INF], [1.0, NAN], [1.0, NAN], True),  # ... within its tolerance: no difference
        ([1.0, NAN], [1.0, NAN], [1.0, NAN], False),  # nothing differs
    ],
)
def test_results_that_differ_only_where_no_value_exists(compiled, eager, reference, undefined):
    from harness.judge.compare import differs_only_where_undefined

    as_float = lambda values, dtype=torch.float32: torch.tensor(values, dtype=dtype)  # noqa: E731
    assert (
        differs_only_where_undefined(as_float(compiled), as_float(eager), as_float(reference, torch.float64))
        == undefined
    )


def test_cosine_pass_and_plain_results_have_no_passed_by():
    eager = torch.arange(1.0, 101.0)
    result = compare_tensors("out0", eager * 1.01, eager, cosine_fallback=True)
    assert result.passed and result.bad == 100 and (result.rule, result.passed_by) == ("cosine", "cosine")
    assert compare_tensors("out0", eager, eager).passed_by is None  # met its tolerance
    assert compare_tensors("out0", eager * 1.01, eager).passed_by is None  # failed


def test_mismatch_map_is_bounded_and_written_compactly(tmp_path):
    from harness.judge.compare import MAP_CELLS
    from harness.records import CaseResult, write_results

    # 2048 x 1024 = 2,097,152 elements; the first 32 rows are wrong: exactly the top row of cells.
    expected = torch.arange(2048 * 1024, dtype=torch.int64).reshape(2048, 1024)
    actual = expected.clone()
    actual[:32] += 1
    result = compare_tensors("out0", actual, expected)
    grid = result.mismatch_map
    assert (grid.rows, grid.cols, grid.cell_rows, grid.cell_cols) == (2048, 1024, 32, 16)
    assert len(grid.counts) == MAP_CELLS and all(len(row) == MAP_CELLS for row in grid.counts)
    assert grid.counts[0] == [32 * 16] * MAP_CELLS and not any(map(any, grid.counts[1:]))
    # A 1-D output of ten million elements is bounded the same way.
    flat = torch.zeros(10_000_000, dtype=torch.bool)
    flat[-1] = True
    tall = compare_tensors("out0", flat, torch.zeros_like(flat)).mismatch_map
    assert len(tall.counts) <= MAP_CELLS and len(tall.counts[0]) <= MAP_CELLS and tall.counts[-1][-1] == 1

    # In the results file a map takes one line per row of cells, not one line per cell.
    path = tmp_path / "r.json"
    write_results(
        path,
        [
            CaseResult(
                case="big",
                device="cpu",
                backend="inductor",
                dtype="int64",
                mode="inference",
                status="fail",
                outputs=[result],
            )
        ],
    )
    text = path.read_text()
    assert len(text.splitlines()) < 200, len(text.splitlines())
    counts = text[text.index('"counts"') :]
    counts = counts[: counts.index("]\n") + 1]
    assert len(counts) <= MAP_CELLS * (MAP_CELLS * 4 + 8), len(counts)
    assert json.loads(text)["records"][0]["outputs"][0]["mismatch_map"]["counts"] == grid.counts


def test_complex32_without_an_equality_kernel_is_still_compared_element_by_element():
    expected = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).to(torch.complex32)
    assert compare_tensors("same", expected.clone(), expected).bad == 0
    shifted = expected.clone()
    shifted[1] += 1j
    differs = compare_tensors("shifted", shifted, expected)
    assert (differs.passed, differs.bad) == (False, 1)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_types_without_kernels_are_compared_exactly(dtype):
    expected = torch.tensor([1, 7, 40000], dtype=torch.int64).to(dtype)
    same = compare_tensors("same", expected.clone(), expected)
    assert (same.passed, same.bad, same.expected_max) == (True, 0, 40000.0)
    differs = expected.clone()
    differs[0] = 2
    result = compare_tensors("differs", differs, expected)
    assert (result.passed, result.bad, result.max_abs) == (False, 1, 1.0)


def test_a_comparison_without_pictures_has_the_same_verdict_and_counts():
    expected = torch.linspace(1, 2, 1000)
    actual = expected.clone()
    actual[::10] += 1.0  # 100 elements off by 1.0
    full = compare_tensors("x", actual, expected)
    bare = compare_tensors("x", actual, expected, pictures=False)
    assert (bare.passed, bare.bad, bare.max_abs, bare.max_abs_index) == (False, 100, full.max_abs, full.max_abs_index)
    assert full.samples and full.mismatch_map and full.error_histogram
    assert not bare.samples and bare.mismatch_map is None and bare.error_histogram is None
