"""Inductor's layout assert, as torch raises it, read back: the op and the dims that differ."""

import pytest
import torch
from torch._C._dynamo.guards import assert_size_stride

from harness.inductor_compat.size_asserts import layout_assert


def test_a_failed_layout_assert_gives_its_op_and_the_dims_that_differ():
    result = torch.empty(5, 10).t()  # (10, 5) with stride (1, 10), where the meta said contiguous
    with pytest.raises(AssertionError) as raised:
        assert_size_stride(result, (10, 5), (5, 1), "torch.ops.aten.copysign.Tensor")
    wrapped = RuntimeError("the compiled run failed")
    wrapped.__cause__ = raised.value
    found = layout_assert(wrapped)
    assert found.op == "torch.ops.aten.copysign.Tensor"
    assert found.said == "expected size 10==10, stride 1==5 at dim=0; expected size 5==5, stride 10==1 at dim=1"


def test_any_other_assertion_is_not_a_layout_assert():
    assert layout_assert(AssertionError("expected 3 outputs")) is None
    assert_size_stride(torch.empty(10, 5), (10, 5), (5, 1))  # a layout that matches raises nothing
