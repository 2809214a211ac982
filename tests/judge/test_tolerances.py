import pytest
import torch
from torch.testing._comparison import default_tolerances

from harness.judge.tolerances import DEFAULT_TOLERANCES, EXACT, FLOAT8_DTYPES, rmse_multiplier, tolerance_for


@pytest.mark.parametrize("dtype", [d for d in DEFAULT_TOLERANCES if d not in FLOAT8_DTYPES])
def test_table_matches_torch_testing(dtype):
    rtol, atol = default_tolerances(dtype)
    assert (DEFAULT_TOLERANCES[dtype].rtol, DEFAULT_TOLERANCES[dtype].atol) == (rtol, atol)


@pytest.mark.parametrize(
    "dtype, rtol, atol",
    [("float8_e4m3fn", 0.125, 2.0**-9), ("float8_e5m2", 0.25, 2.0**-16)],
)
def test_float8_allows_one_step_where_torch_testing_has_no_entry(dtype, rtol, atol):
    # torch.testing compares float8 exactly (no entry in its table); a compiled program that rounds once where
    # eager rounded otherwise is one float8 step off: one eps relative, the smallest subnormal absolute.
    dtype = getattr(torch, dtype)
    assert default_tolerances(dtype) == (0.0, 0.0)
    assert (tolerance_for(dtype).rtol, tolerance_for(dtype).atol) == (rtol, atol)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_and_bool_dtypes_are_exact(dtype):
    assert tolerance_for(dtype) == EXACT


def test_rmse_multiplier_follows_torchbench():
    assert rmse_multiplier(torch.float32, 10_000) == 2.0
    assert rmse_multiplier(torch.bfloat16, 10_000) == 3.0
    assert rmse_multiplier(torch.float32, 999) == 3.0
