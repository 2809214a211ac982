"""The narrowing the harness does in a launcher's place, right and in each wrong way, on known tensors."""

import torch

from harness.probe.launcher import (
    COLLAPSED,
    NOT_WRITTEN_BACK,
    POISON_BYTE,
    UNFILLED,
    _PoisonedEmpty,
    narrowed_by_harness,
)

NAMES = ["in_ptr0", "in_out_ptr0", "xnumel"]
NARROWED = {"in_ptr0": "*i64", "in_out_ptr0": "*i64"}


def arguments():
    base = torch.arange(24, dtype=torch.int64)
    gapped = base.as_strided((2, 3), (8, 2), 1)  # elements 1, 3, 5 and 9, 11, 13: not dense
    in_out = torch.tensor([10, 20, 30], dtype=torch.int64)
    return [gapped, in_out, 3]


def test_narrowed_right_keeps_each_layout_fills_it_and_writes_it_back():
    args = arguments()
    given, write_backs = narrowed_by_harness(args, NARROWED, NAMES)
    gapped, in_out = given[0], given[1]
    # Over a narrow copy of its whole storage: the same offset, and the 24 elements a load past its last
    # element (14, a gap) may still reach, as in the argument's own storage.
    assert gapped.dtype == torch.int32 and gapped.stride() == (8, 2) and gapped.storage_offset() == 1
    assert gapped.untyped_storage().nbytes() == 24 * 4
    assert gapped.tolist() == [[1, 3, 5], [9, 11, 13]] and in_out.tolist() == [10, 20, 30]
    assert given[2] == 3  # not a tensor: left as it is
    in_out.add_(1)  # what a kernel stores
    storage = gapped.as_strided((24,), (1,), 0)
    storage[0], storage[20] = -1, -1  # outside the span (1 to 13): never written back
    for wide, narrow in write_backs:
        wide.copy_(narrow.to(wide.dtype))
    assert args[1].tolist() == [11, 21, 31] and args[0].tolist() == [[1, 3, 5], [9, 11, 13]]
    assert args[0].as_strided((24,), (1,), 0).tolist() == list(range(24))


def test_collapsed_hands_a_non_dense_argument_its_dense_copy():
    given, _ = narrowed_by_harness(arguments(), NARROWED, NAMES, {"in_ptr0": COLLAPSED})
    # The copy Tensor.to() gives: dense, so a kernel addressing it with strides (8, 2) from offset 1 reads other
    # elements than the argument's.
    assert given[0].stride() == (3, 1) and given[0].flatten().tolist() == [1, 3, 5, 9, 11, 13]


def test_unfilled_hands_a_copy_that_does_not_hold_the_arguments_values():
    with _PoisonedEmpty():
        given, write_backs = narrowed_by_harness(arguments(), NARROWED, NAMES, {"in_out_ptr0": UNFILLED})
    poisoned = int.from_bytes(bytes([POISON_BYTE] * 4), "little")
    assert given[1].tolist() == [poisoned] * 3 and len(write_backs) == 2


def test_not_written_back_loses_what_the_kernel_stored():
    args = arguments()
    given, write_backs = narrowed_by_harness(args, NARROWED, NAMES, {"in_out_ptr0": NOT_WRITTEN_BACK})
    given[1].add_(1)
    for wide, narrow in write_backs:
        wide.copy_(narrow.to(wide.dtype))
    assert args[1].tolist() == [10, 20, 30] and len(write_backs) == 1


def test_an_argument_already_narrow_is_left_to_the_kernel_as_it_is():
    args = [torch.arange(3, dtype=torch.int32), torch.arange(3, dtype=torch.int64), 3]
    given, write_backs = narrowed_by_harness(args, NARROWED, NAMES)
    assert given[0] is args[0] and len(write_backs) == 1


def test_empty_memory_holds_the_poison_only_while_the_replays_run():
    with _PoisonedEmpty():
        inside = [torch.empty(3), torch.empty_like(torch.ones(2, dtype=torch.int64)), torch.ones(1).new_empty(2)]
    for tensor in inside:
        assert set(tensor.view(torch.uint8).tolist()) == {POISON_BYTE}
    assert torch.ones(4).sum().item() == 4  # other ops untouched
