import re

import pytest
import torch

from harness.inputs import broadcast, clone_exact, contiguous, gapped, materialize, permuted, seed_for, strided


def make(spec, dtype=torch.float32, seed=0):
    return materialize(spec.with_dtype(dtype), torch.Generator().manual_seed(seed), "cpu")


def test_layout_constructors_give_the_layouts_they_name():
    assert make(permuted((2, 3, 4), (0, 2, 1))).stride() == torch.empty(2, 3, 4).permute(0, 2, 1).stride()
    gap = make(gapped((4, 5), step=3))
    assert gap.stride() == torch.empty(4, 15)[:, ::3].stride() and gap.untyped_storage().nbytes() == 60 * 4
    assert make(broadcast((3, 4), (1, 4))).stride() == (0, 1)
    view = make(strided((12, 4, 768, 64), (98304, 16384, 64, 1), storage_numel=1179648, fill="arange"), torch.int64)
    assert view.stride() == (98304, 16384, 64, 1) and view.untyped_storage().nbytes() == 1179648 * 8
    assert view[0, 1, 0, 0].item() == 16384 and view[11, 3, 767, 63].item() == 1179647


def test_values_are_deterministic_per_seed():
    spec = contiguous((8,))
    assert torch.equal(make(spec, seed=seed_for("case", "float32")), make(spec, seed=seed_for("case", "float32")))
    assert not torch.equal(make(spec, seed=seed_for("case", "float32")), make(spec, seed=seed_for("other", "float32")))
    assert seed_for("a", "b") == 133447708  # crc32 of "a/b": the same in every process and Python version


def test_clone_exact_keeps_overlapping_strides_and_storage():
    view = torch.arange(100).as_strided((4, 30), (20, 1), 5)
    copy = clone_exact(view)
    assert copy.stride() == view.stride() and copy.storage_offset() == 5
    assert torch.equal(copy, view) and copy.untyped_storage().data_ptr() != view.untyped_storage().data_ptr()
    assert view.clone().stride() != view.stride()  # why clone_exact exists


def test_clone_exact_to_float64_and_grad_leaf():
    leaf = make(contiguous((3, 4), requires_grad=True))
    copy = clone_exact(leaf, torch.float64)
    assert copy.dtype == torch.float64 and copy.requires_grad and copy.is_leaf


def test_non_overlapping_and_dense_matches_what_to_keeps():
    from harness.inputs import is_non_overlapping_and_dense

    base = torch.empty(6, 8)
    layouts = [base, base.t(), base[1:], base[:, ::2], base[:1].expand(6, 8), base.as_strided((3, 8), (2, 1))]
    for t in layouts:
        keeps = t.to(torch.float64).stride() == t.stride()
        assert is_non_overlapping_and_dense(t) == keeps, (t.shape, t.stride())


def test_non_overlapping_allows_gaps_but_not_shared_addresses():
    from harness.inputs import is_non_overlapping

    base = torch.empty(16, 16)
    assert is_non_overlapping(base[:, :8]) and is_non_overlapping(base[:, ::2]) and is_non_overlapping(base.t())
    assert not is_non_overlapping(base[:1].expand(4, 16))
    assert not is_non_overlapping(torch.empty(100).as_strided((4, 30), (20, 1)))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: permuted((8, 16, 32), (2, 0)), "permuted((8, 16, 32), (2, 0)): dims must be a permutation of 0..2"),
        (lambda: permuted((8, 16), (1, 1)), "dims must be a permutation of 0..1"),
        (lambda: gapped((8, 16), step=1), "step must be a whole number >= 2"),
        (lambda: gapped((8, 16), step=2, dim=2), "dim must be a dimension of size (rank 2)"),
        (lambda: broadcast((4, 8), (2, 8)), "from_size must expand to size"),
        (lambda: broadcast((8,), (1, 8)), "from_size must expand to size"),
        (lambda: strided((4, 4), (1,)), "needs one stride per dimension"),
        (lambda: strided((4, 4), (4, 1), storage_numel=8), "storage_numel 8 is smaller than the 16 elements"),
        (lambda: contiguous((4, 2.5)), "size (4, 2.5) must be whole numbers >= 0"),
        (lambda: contiguous((4,), fill="zeros"), "fill 'zeros' is not one of"),
    ],
)
def test_a_layout_constructor_rejects_arguments_that_describe_another_layout(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()
