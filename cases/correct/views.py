"""Correct programs: views, slices, gathers and concatenations.

Transposes, narrow, unbind, split + cat, stack, expand + reduction,
view/reshape of permuted tensors, stepped slices, gather/index_select with
int64 indices, and cat of matmul results. Inductor turns most of these into
index arithmetic inside fused kernels (or writes the matmuls straight into the
cat's buffer); the values are exactly eager's up to summation order.
"""

import torch

from harness import KnownFailure, Program, case, contiguous, gapped, permuted

FLOATS = (torch.bfloat16, torch.float16, torch.float32)
BOTH_MODES = ("inference", "training")

# torch_npu's own backend, in training (found_torch_npu_reduction_tile_overread, cases/found_torch_npu.py).
REDUCTION_TILE_OVERREAD = KnownFailure(
    "torch_npu's triton_experimental masks a load of a tiled multi-axis reduction by the innermost node's mask "
    "only: the last tile reads past the input's end (docs/found/torch_npu_reduction_tile_overread.md)",
    npu_backend="triton_experimental",
    torch_npu=">2.13.0rc1,<=2.14.0",
    mode="training",
)
# torch_npu 2.13.0rc1 (and no later release): the opposite of the above. A load of a multi-axis reduction indexed by
# the inner node alone (`in_ptr1 + (r0_1)`, a [1, 1, 256] pointer) takes the outer node's mask too (`r0_2mask &
# r0_1mask`, [1, 3, 256]); Triton's load broadcasts the mask to the pointer's shape and cannot (triton-ascend 3.2.0
# `language/semantic.py` `_load_legacy` line 1089: "Cannot broadcast"), in the interpreter as in the compiler.
REDUCTION_MASK_WIDER_THAN_LOAD = KnownFailure(
    "torch_npu 2.13.0rc1 masks a load of a multi-axis reduction indexed by the inner node alone with the outer "
    "node's mask too: Triton cannot broadcast the [1, 3, 256] mask to the [1, 1, 256] pointer, and the kernel does "
    "not compile",
    npu_backend="triton_experimental",
    torch_npu=">=2.13.0rc1,<=2.13.0rc1",
)


def transpose_narrow(x, y):
    a = x.t().narrow(0, 3, 200)  # rows 3..202 of the transpose
    b = y.transpose(0, 1).narrow(1, 16, 128)
    return (a * 2 + b.sum(dim=1, keepdim=True)).sum(dim=0), a.contiguous()


@case(tags=("correct", "views", "transpose", "narrow"), dtypes=FLOATS, modes=BOTH_MODES)
def correct_transpose_narrow(dtype):
    """narrow of transposed inputs, broadcast add and a column reduction over 200 rows."""
    return Program(
        transpose_narrow,
        [
            contiguous((96, 256), requires_grad=True),
            contiguous((160, 200), requires_grad=True),
        ],
    )


def unbind_split_cat(x):
    first, second, third = x.unbind(dim=1)  # x: (64, 3, 512)
    left, middle, right = torch.split(first, [100, 300, 112], dim=-1)
    rejoined = torch.cat([right, left * second[:, :100], middle + third[:, 212:]], dim=-1)
    return rejoined, rejoined.pow(2).mean(dim=-1)


@case(tags=("correct", "views", "unbind", "split", "cat"), dtypes=FLOATS, modes=BOTH_MODES)
def correct_unbind_split_cat(dtype):
    """unbind, uneven split and cat of the pieces in another order, then a mean of squares."""
    return Program(unbind_split_cat, [contiguous((64, 3, 512), requires_grad=True)])


def stack_expand_reduce(a, b, row):
    stacked = torch.stack([a, b, a - b], dim=1)  # (32, 3, 256)
    expanded = row.expand(32, 3, 256)  # row: (256,)
    return (stacked * expanded).sum(dim=(1, 2)), expanded.sum(dim=0), stacked.amax(dim=1)


@case(
    tags=("correct", "views", "stack", "expand", "reduction"),
    dtypes=FLOATS,
    modes=BOTH_MODES,
    # The backward's sum over (32, 3) loads two of its inputs by the outer node alone (x0 + 256*r0_2, no r0_2mask).
    known_failures=(REDUCTION_TILE_OVERREAD, REDUCTION_MASK_WIDER_THAN_LOAD),
)
def correct_stack_expand_reduce(dtype):
    """stack along a new middle dim, multiply by an expanded row, reduce over (1, 2) and over the expand."""
    return Program(
        stack_expand_reduce,
        [
            contiguous((32, 256), requires_grad=True),
            contiguous((32, 256), requires_grad=True),
            contiguous((256,), requires_grad=True),
        ],
    )


def reshape_permuted(x):
    # x: (8, 64, 48) viewed from a (8, 48, 64) storage; reshape must copy, view of a contiguous copy must not.
    flat = x.reshape(8, 64 * 48)
    heads = x.contiguous().view(8, 64, 6, 8).permute(0, 2, 1, 3).reshape(48, 512)
    return torch.softmax(flat, dim=-1), heads.sum(dim=-1), heads.t().reshape(-1)[::7]


@case(tags=("correct", "views", "reshape", "permuted"), dtypes=FLOATS, modes=BOTH_MODES)
def correct_reshape_permuted(dtype):
    """reshape of a permuted input, view + permute + reshape into heads, and a stepped flat view."""
    return Program(reshape_permuted, [permuted((8, 48, 64), (0, 2, 1), requires_grad=True)])


def stepped_slices(x, y):
    a = x[::2, 1::3]  # (64, 171)
    b = y[:, ::4]  # y gapped already
    return a.sum(dim=-1) + b[:64, :171].mean(dim=-1), x[1::2, ::2].cumsum(dim=0)


@case(
    tags=("correct", "views", "slice", "step"),
    dtypes=FLOATS,
    modes=BOTH_MODES,
    # x[1::2]'s backward (a slice_scatter from row 1) clamps its load's index with tl.maximum(index, 0), which
    # torch_npu's fixup rewrites to tl.maximum(index, 3): gradient elements [1, 0], [1, 2] and [1, 4] take [1, 6]'s.
    known_failures=(
        KnownFailure(
            "torch_npu's triton_experimental rewrites a masked load's index clamp tl.maximum(index, 0) to "
            "tl.maximum(index, rank - 1) (docs/found/torch_npu_index_clamp_rewritten.md)",
            npu_backend="triton_experimental",
            torch_npu=">2.13.0rc1,<=2.14.0",
            mode="training",
        ),
    ),
)
def correct_stepped_slices(dtype):
    """slices with steps (and an offset start) of a contiguous and of a gapped input, then reductions."""
    return Program(
        stepped_slices,
        [
            contiguous((128, 512), requires_grad=True),
            gapped((96, 768), step=2, requires_grad=True),
        ],
    )


def gather_index_select(x, index, rows):
    gathered = torch.gather(x, 1, index)  # index: (64, 300) in [0, 1024)
    selected = torch.index_select(x, 0, rows)  # rows: (40,) in [0, 64)
    return gathered.sum(dim=-1), selected.mean(dim=0), gathered


@case(tags=("correct", "views", "gather", "index_select", "index"), dtypes=FLOATS, modes=BOTH_MODES)
def correct_gather_index_select(dtype):
    """gather along dim 1 and index_select along dim 0 with int64 indices, then reductions.

    The indices are distinct within each gathered row and among the selected
    rows: the backward of a repeated index adds into one element with atomics on
    CUDA, in eager as well, and in bfloat16 two eager runs then differ (a
    `nondeterministic` verdict, not a test of the compiler). Accumulation into
    repeated indices is covered by the index_put/scatter cases.
    """
    generator = torch.Generator().manual_seed(0)
    index = torch.rand(64, 1024, generator=generator).argsort(dim=1)[:, :300]
    rows = torch.randperm(64, generator=generator)[:40]
    return Program(gather_index_select, [contiguous((64, 1024), requires_grad=True), index, rows])


def cat_of_matmuls(x, w1, w2, w3):
    h = torch.cat([x @ w1, x @ w2, torch.relu(x) @ w3], dim=-1)
    return h, torch.log_softmax(h, dim=-1)


@case(tags=("correct", "views", "cat", "matmul"), dtypes=(torch.bfloat16, torch.float32), modes=BOTH_MODES)
def correct_cat_matmuls(dtype):
    """torch.cat of three matmuls (one of a relu) along the feature dim, then log_softmax over it."""
    return Program(
        cat_of_matmuls,
        [
            contiguous((128, 256), requires_grad=True),
            contiguous((256, 192), fill="rand", low=-0.1, high=0.1, requires_grad=True),
            contiguous((256, 128), fill="rand", low=-0.1, high=0.1, requires_grad=True),
            permuted((64, 256), (1, 0), fill="rand", low=-0.1, high=0.1, requires_grad=True),
        ],
    )


def bmm_heads_cat(x, w):
    # x: (4, 128, 64); w: (64, 256) -> 4 heads of 64, transposed and concatenated back.
    h = (x @ w).view(4, 128, 4, 64).transpose(1, 2)  # (4, 4, 128, 64)
    scores = h @ h.transpose(-1, -2)  # (4, 4, 128, 128)
    return torch.cat(scores.unbind(dim=1), dim=-1).sum(dim=-1)


@case(tags=("correct", "views", "cat", "matmul", "transpose"), dtypes=(torch.bfloat16, torch.float32), modes=BOTH_MODES)
def correct_bmm_heads_cat(dtype):
    """Batched matmuls on transposed head views, unbind and cat of the results, then a 512-long sum."""
    return Program(
        bmm_heads_cat,
        [
            contiguous((4, 128, 64), requires_grad=True),
            contiguous((64, 256), fill="rand", low=-0.15, high=0.15, requires_grad=True),
        ],
    )
