import pytest
import torch
from torch.testing._comparison import default_tolerances

from harness.judge.tolerances import DEFAULT_TOLERANCES, EXACT, rmse_multiplier, tolerance_for


@pytest.mark.parametrize("dtype", list(DEFAULT_TOLERANCES))
def test_table_matches_torch_testing(dtype):
    rtol, atol = default_tolerances(dtype)
    assert (DEFAULT_TOLERANCES[dtype].rtol, DEFAULT_TOLERANCES[dtype].atol) == (rtol, atol)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_and_bool_dtypes_are_exact(dtype):
    assert tolerance_for(dtype) == EXACT


def test_rmse_multiplier_follows_torchbench():
    assert rmse_multiplier(torch.float32, 10_000) == 2.0
    assert rmse_multiplier(torch.bfloat16, 10_000) == 3.0
    assert rmse_multiplier(torch.float32, 999) == 3.0
