"""The layout family seed 000 says shares its root cause.

Every non-dense layout of an int64 or float64 kernel argument, on the input
side (a kernel reads it) and the output side (a kernel writes it in place).
Dense layouts are here as controls: a conversion that collapses layouts must
leave them intact. Each entry of `INPUT_LAYOUTS` is one case; values are made
with `arange` so a misaddressed read shows up as a wrong value, never as noise.
"""

import torch

from harness import Case, Program, broadcast, contiguous, gapped, permuted, strided

ISSUE = (
    "torch_npu Inductor (triton_experimental) report on AllenaiLongformerBase training (int64 boundary "
    "downcast collapses a non-dense layout): the same risk for every non-dense int64/float64 kernel argument"
)
WIDE_DTYPES = (torch.int64, torch.float64)
# arange's start: a tenth makes float64 values (and results) that float32 cannot
# hold exactly, so narrowing shows as rounding; integers keep plain addresses (int(0.1) == 0).
START = 0.1

# name -> (layout spec, is the layout non-overlapping and dense?)
INPUT_LAYOUTS = {
    "contiguous": (contiguous((48, 64), fill="arange", low=START), True),
    "permuted": (permuted((64, 48), (1, 0), fill="arange", low=START), True),
    "storage_offset": (strided((48, 64), (64, 1), storage_offset=320, fill="arange", low=START), True),
    "gapped_slice": (gapped((48, 64), step=3, fill="arange", low=START), False),
    "broadcast": (broadcast((48, 64), (1, 64), fill="arange", low=START), False),
    "broadcast_rows": (broadcast((48, 64), (48, 1), fill="arange", low=START), False),
    "overlapping": (strided((6, 4, 64, 16), (2048, 512, 16, 1), storage_numel=12800, fill="arange", low=START), False),
}


def read_and_scale(x):
    return x * 3 + 1


def _input_case(layout, spec, dense):
    return Case(
        name=f"layout_input_{layout}",
        build=lambda dtype: Program(read_and_scale, [spec]),
        tags=(
            "layout",
            "input-side",
            "dense" if dense else "non-dense",
            layout,
            *(("quick",) if layout == "overlapping" else ()),
        ),  # the family's sample in the quick run
        dtypes=WIDE_DTYPES,
        issue=ISSUE,
        description=f"A kernel reads an argument laid out as {layout} ({spec.describe()}).",
    )


def scale_in_place(view):
    view.mul_(3).add_(1)
    return view.sum()


def put_through_index(buffer, values):
    # 7 is coprime with the buffer's length, so the indices are unique and the result deterministic.
    index = torch.arange(values.numel(), device=buffer.device) * 7 % buffer.numel()
    buffer.index_put_((index,), values)
    return buffer


CASES = [_input_case(name, spec, dense) for name, (spec, dense) in INPUT_LAYOUTS.items()]

CASES += [
    Case(
        name="layout_output_inplace_gapped",
        build=lambda dtype: Program(scale_in_place, [gapped((48, 64), step=2, fill="arange", low=START)]),
        tags=("layout", "output-side", "non-dense", "gapped_slice", "inplace", "quick"),
        dtypes=WIDE_DTYPES,
        issue=ISSUE,
        description="A kernel updates a gapped slice in place (an in/out argument with holes).",
    ),
    Case(
        name="layout_output_inplace_permuted",
        build=lambda dtype: Program(scale_in_place, [permuted((64, 48), (1, 0), fill="arange", low=START)]),
        tags=("layout", "output-side", "dense", "permuted", "inplace"),
        dtypes=WIDE_DTYPES,
        issue=ISSUE,
        description="Control: a kernel updates a permuted (dense) tensor in place.",
    ),
    Case(
        name="layout_output_index_put_gapped",
        build=lambda dtype: Program(
            put_through_index,
            [
                gapped((4096,), step=2, fill="arange", low=START),
                contiguous((512,), fill="randint", low=-1000, high=1000),
            ],
        ),
        tags=("layout", "output-side", "non-dense", "gapped_slice", "index_put", "index"),
        dtypes=(torch.int64,),
        issue=ISSUE,
        description="index_put_ into a gapped int64 buffer: a scatter writes a non-dense output.",
    ),
    Case(
        name="layout_output_slices_of_one_buffer",
        build=lambda dtype: Program(
            blocks_on_a_diagonal,
            [
                contiguous((1, 5), fill="arange", low=START),
                contiguous((2, 5), fill="arange", low=START),
                contiguous((3, 5), fill="arange", low=START),
            ],
        ),
        tags=("layout", "output-side", "aliasing", "block_diag"),
        dtypes=WIDE_DTYPES,
        issue=ISSUE,
        description="block_diag: one kernel writes slices of a buffer (views at offsets, each non-dense) and reads "
        "the buffer back; a launcher converting each argument on its own loses the writes.",
    ),
]


def blocks_on_a_diagonal(a, b, c):
    return torch.block_diag(a, b, c)
