"""Found by the harness in torch_npu's own compiler, on the CPU surrogate (`NPU_SURROGATE_CODEGEN=torch_npu`).

An in-place update through an `as_strided` view is dropped:

torch_npu's `triton_experimental` backend keeps Inductor's lowering only for the ops in its `GENERATE_LIST`
(`torch_npu/_inductor/triton_experimental/lowering_override_list.py`, 2.14.0 lines 22-106); every other op that is
not a decomposition becomes a fallback (`lowering.py` `_register_npu_inductor_fallbacks`, lines 87-111).
`aten.as_strided` is not in the list: its lowering, a view of its input, becomes a `FallbackKernel` whose output
Inductor does not know to alias the clone. The `copy_` that functionalization and reinplacing write into that view
then mutates a buffer no output reads, and Inductor drops it: the compiled program returns the clone without the
update. Seen in torch_npu 2.13.0 and 2.14.0; the `default` backend, upstream Inductor and the surrogate's other
modes compute it right. docs/found/torch_npu_as_strided_update_dropped.md has the repro and the lines. The same
for `aten.diagonal`, found by the OpInfo sweep (linalg_householder_product and diag in training).

An in-place foreach update fails to compile (`torch._foreach_add_`, as every optimizer's foreach step writes):
the same loop makes `aten._foreach_add_.List` a fallback, which returns nothing, while Inductor's reinplacing
(`fx_passes/reinplace.py`) turns the functional `_foreach_add` into it and leaves the `getitem` nodes that read
its results, which only Inductor's own foreach lowering (a list of the updated inputs) can answer:
`AssertionError: <built-in function getitem> is not an OpOverload`. Longformer's training step under
torch_npu's backend stops there. docs/found/torch_npu_foreach_inplace_fallback.md.

A multi-axis reduction over static dims split across the cores names an undefined `r0_2numel`: the split axis is
picked from the looped (not symbolic) node, whose length is never a kernel argument. The kernel does not compile.
docs/found/torch_npu_rsplit_undefined_numel.md.

The select-lane rewrite loads a widened tile under a mask that leaves the column's offset out: the last block reads
past the input's end (the surrogate's memory checker stops it). docs/found/torch_npu_select_lane_overread.md.

A pointwise kernel linearized into several axes has its reduction-dim fixup rewrite every `, 0)` on a line that
mentions `triton_helpers.`: a masked load's non-negative index clamp `tl.maximum(index, 0)` becomes
`tl.maximum(index, <rank - 1>)`, so the first elements read the wrong one (`slice_scatter` with start 1, step 2,
as `x[1::2]`'s backward writes). docs/found/torch_npu_index_clamp_rewritten.md.

A multi-axis reduction whose reduction nodes are tiled (each node a vector tile of R0_BLOCK's share) masks a load
by the innermost node's mask only: a load indexed by an outer node alone carries no reduction mask, and the last
tile reads past the input's end (the memory checker stops it). docs/found/torch_npu_reduction_tile_overread.md.

An int64 min or max reduction does not compile: int64 compute types are demoted to `tl.int32`, while the
accumulator's start value stays int64's bound, `tl.full(..., 9223372036854775807, tl.int32)`.
docs/found/torch_npu_int64_reduction_identity_narrowed.md.
"""

import torch

from harness import KnownFailure, Program, case, contiguous

ISSUE = "docs/found/torch_npu_as_strided_update_dropped.md (found by this harness, on the CPU surrogate)"
REASON = (
    "torch_npu's triton_experimental makes aten.as_strided a fallback (not in GENERATE_LIST): an in-place update "
    "through the view mutates a buffer Inductor does not know aliases its base, and is dropped"
)
AS_STRIDED_UPDATE_DROPPED = KnownFailure(REASON, npu_backend="triton_experimental", torch_npu=">=2.13.0,<=2.14.0")


def add_into_window(x, update):
    y = x.clone()
    y.as_strided((2, 3), (8, 1), 1).add_(update)  # rows of 3, 8 apart, from element 1: a window of y's storage
    return y


@case(
    tags=("found", "torch_npu", "inplace", "as_strided"),
    dtypes=(torch.float32,),
    modes=("inference",),
    issue=ISSUE,
    known_failures=(AS_STRIDED_UPDATE_DROPPED,),
)
def found_torch_npu_as_strided_update_dropped(dtype):
    """add_ into an as_strided window of a clone (16 elements, 6 updated): the compiled result lacks the update."""
    return Program(add_into_window, [contiguous((16,)), contiguous((2, 3))])


def add_to_diagonal(x, update):
    y = x.clone()
    y.diagonal().add_(update)
    return y


@case(
    tags=("found", "torch_npu", "inplace", "diagonal"),
    dtypes=(torch.float32,),
    modes=("inference",),
    issue=ISSUE,
    known_failures=(
        KnownFailure(
            "torch_npu's triton_experimental makes aten.diagonal a fallback (not in GENERATE_LIST): an in-place update "
            "through the view is dropped, as through as_strided",
            npu_backend="triton_experimental",
            torch_npu=">=2.13.0,<=2.14.0",
        ),
    ),
)
def found_torch_npu_diagonal_update_dropped(dtype):
    """add_ into the diagonal of a clone (16 elements, 4 updated): the compiled result lacks the update."""
    return Program(add_to_diagonal, [contiguous((4, 4)), contiguous((4,))])


FOREACH_ISSUE = "docs/found/torch_npu_foreach_inplace_fallback.md (found by this harness, on the CPU surrogate)"
FOREACH_REASON = (
    "torch_npu's triton_experimental makes aten._foreach_add_.List a fallback (not in GENERATE_LIST), which returns "
    "nothing: the getitem nodes Inductor's reinplacing leaves on it fail to lower"
)


def foreach_step(a, b, grad_a, grad_b):
    torch._foreach_add_([a, b], [grad_a, grad_b], alpha=-0.1)  # an optimizer's foreach update of two parameters
    return a.sum() + b.sum()


@case(
    tags=("found", "torch_npu", "inplace", "foreach"),
    dtypes=(torch.float32,),
    modes=("inference",),
    issue=FOREACH_ISSUE,
    known_failures=(KnownFailure(FOREACH_REASON, npu_backend="triton_experimental", torch_npu=">=2.13.0,<=2.14.0"),),
)
def found_torch_npu_foreach_inplace_fallback(dtype):
    """torch._foreach_add_ over two tensors, then their sums: the compile fails under torch_npu's backend."""
    return Program(foreach_step, [contiguous((8,)), contiguous((8,)), contiguous((8,)), contiguous((8,))])


UNDEFINED_NUMEL_ISSUE = "docs/found/torch_npu_rsplit_undefined_numel.md (found by this harness, on the CPU surrogate)"
UNDEFINED_NUMEL_REASON = (
    "torch_npu's triton_experimental splits a static multi-axis reduction across the cores along a looped axis "
    "(r0_2) and bounds each core's share by r0_2numel, a name the kernel never defines: the kernel does not compile"
)


def sum_over_first_and_last(x):
    return x.sum(dim=(0, 2))


@case(
    tags=("found", "torch_npu", "reduction", "rsplit"),
    dtypes=(torch.float32,),
    modes=("inference",),
    issue=UNDEFINED_NUMEL_ISSUE,
    # 2.13.0 and 2.14.0 ship the same triton_experimental; 2.13.0rc1 has no split-axis choice (no such name).
    known_failures=(
        KnownFailure(UNDEFINED_NUMEL_REASON, npu_backend="triton_experimental", torch_npu=">2.13.0rc1,<=2.14.0"),
    ),
)
def found_torch_npu_rsplit_undefined_numel(dtype):
    """x.sum(dim=(0, 2)) on a (64, 4, 32) input: the rsplit partial kernel names an undefined r0_2numel."""
    return Program(sum_over_first_and_last, [contiguous((64, 4, 32))])


OVERREAD_ISSUE = "docs/found/torch_npu_select_lane_overread.md (found by this harness, on the CPU surrogate)"


@case(
    tags=("found", "torch_npu", "matmul", "out-of-bounds"),
    dtypes=(torch.float32,),
    modes=("inference",),
    issue=OVERREAD_ISSUE,
    known_failures=(
        KnownFailure(
            "torch_npu's triton_experimental select-lane rewrite masks a widened load without the column's offset: "
            "the last block reads past the end of the matrix (the surrogate's memory checker stops it)",
            npu_backend="triton_experimental",
            torch_npu=">=2.13.0,<=2.14.0",
        ),
    ),
)
def found_torch_npu_select_lane_overread(dtype):
    """torch.mv of a (5, 4) matrix: column j's widened load reads j elements past the matrix's end."""
    return Program(torch.mv, [contiguous((5, 4)), contiguous((4,))])


CLAMP_ISSUE = "docs/found/torch_npu_index_clamp_rewritten.md (found by this harness, on the CPU surrogate)"
CLAMP_REASON = (
    "torch_npu's triton_experimental linearizes a pointwise kernel into several axes and its reduction-dim fixup "
    "rewrites ', 0)' on any line naming triton_helpers: a masked load's index clamp tl.maximum(index, 0) becomes "
    "tl.maximum(index, rank - 1) and the first elements read the wrong one"
)
# 2.13.0 and 2.14.0 emit the clamp (codegen/triton.py line 3734); 2.13.0rc1 emits none, and computes it right.
INDEX_CLAMP_REWRITTEN = KnownFailure(CLAMP_REASON, npu_backend="triton_experimental", torch_npu=">2.13.0rc1,<=2.14.0")


def scatter_into_odd_rows(base, src):
    return torch.slice_scatter(base, src, dim=0, start=1, step=2)  # what x[1::2]'s backward writes


@case(
    tags=("found", "torch_npu", "slice_scatter", "index"),
    dtypes=(torch.float32,),
    modes=("inference",),
    issue=CLAMP_ISSUE,
    known_failures=(INDEX_CLAMP_REWRITTEN,),
)
def found_torch_npu_index_clamp_rewritten(dtype):
    """slice_scatter of a (4, 16) source into rows 1, 3, 5, 7 of an (8, 16) base: element [1, 0] reads src[0, 1]."""
    return Program(scatter_into_odd_rows, [contiguous((8, 16)), contiguous((4, 16))])


TILE_OVERREAD_ISSUE = "docs/found/torch_npu_reduction_tile_overread.md (found by this harness, on the CPU surrogate)"
TILE_OVERREAD_REASON = (
    "torch_npu's triton_experimental tiles each node of a multi-axis reduction but masks a load only by the "
    "innermost node's mask: a load indexed by another node carries no reduction mask and its last tile reads past "
    "the input's end (the surrogate's memory checker stops it)"
)
# 2.13.0 and 2.14.0 tile the reduction's nodes this way; 2.13.0rc1 does not, and reads in bounds.
REDUCTION_TILE_OVERREAD = KnownFailure(
    TILE_OVERREAD_REASON, npu_backend="triton_experimental", torch_npu=">2.13.0rc1,<=2.14.0"
)


def sum_of_broadcast_product(a, b):
    return (a.unsqueeze(1) * b).sum(dim=(0, 1))  # a is indexed by the outer reduction node alone


@case(
    tags=("found", "torch_npu", "reduction", "out-of-bounds"),
    dtypes=(torch.float32,),
    modes=("inference",),
    issue=TILE_OVERREAD_ISSUE,
    known_failures=(REDUCTION_TILE_OVERREAD,),
)
def found_torch_npu_reduction_tile_overread(dtype):
    """(a[:, None] * b).sum(dim=(0, 1)), a (32, 256), b (32, 3, 256): a's load reads past its end."""
    return Program(sum_of_broadcast_product, [contiguous((32, 256)), contiguous((32, 3, 256))])


IDENTITY_ISSUE = (
    "docs/found/torch_npu_int64_reduction_identity_narrowed.md (found by this harness, on the CPU surrogate)"
)
IDENTITY_REASON = (
    "torch_npu's triton_experimental demotes int64 compute types to tl.int32 (_npu_triton_compute_type) while a "
    "min/max reduction's start value stays int64's bound: tl.full(..., 9223372036854775807, tl.int32) does not "
    "compile"
)
# The demotion is in 2.13.0rc1, 2.13.0 and 2.14.0 alike (codegen/triton.py `apply_npu_codegen_patches`); ">=2.13.0"
# takes the pre-release in.
INT64_IDENTITY_NARROWED = KnownFailure(
    IDENTITY_REASON, npu_backend="triton_experimental", torch_npu=">=2.13.0,<=2.14.0"
)


def row_min(x):
    return torch.amin(x, dim=1)


@case(
    tags=("found", "torch_npu", "reduction", "int64"),
    dtypes=(torch.int64,),
    modes=("inference",),
    issue=IDENTITY_ISSUE,
    known_failures=(INT64_IDENTITY_NARROWED,),
)
def found_torch_npu_int64_reduction_identity_narrowed(dtype):
    """amin over dim 1 of an (8, 16) int64 input: the kernel's accumulator starts at 2**63 - 1 typed tl.int32."""
    return Program(row_min, [contiguous((8, 16), dtype=dtype, fill="randint", low=-100, high=100)])


BOOL_MINIMUM_ISSUE = "docs/found/torch_npu_bool_minimum.md (found by this harness, on the CPU surrogate)"
BOOL_MINIMUM_REASON = (
    "torch_npu's triton_experimental emits tl.minimum/tl.maximum for every dtype (NPUTritonKernelOverrides); "
    "triton-ascend's semantic refuses an int1 (bool) operand: the kernel does not compile"
)
# 2.13.0rc1 emits tl.minimum(a, b) without the NaN argument: the same refusal.
BOOL_MINIMUM = KnownFailure(BOOL_MINIMUM_REASON, npu_backend="triton_experimental", torch_npu=">=2.13.0,<=2.14.0")


@case(
    tags=("found", "torch_npu", "bool"),
    dtypes=(torch.bool,),
    modes=("inference",),
    issue=BOOL_MINIMUM_ISSUE,
    known_failures=(BOOL_MINIMUM,),
)
def found_torch_npu_bool_minimum(dtype):
    """torch.maximum of two bool vectors: the kernel's tl.maximum of int1 operands does not compile."""
    return Program(torch.maximum, [contiguous((16,), dtype=dtype), contiguous((16,), dtype=dtype)])


WRITE_BACK_ISSUE = (
    "docs/found/torch_npu_launcher_write_back_overlapping.md (found by this harness, on the CPU surrogate)"
)
WRITE_BACK_REASON = (
    "torch_npu's launcher writes a narrowed int64 output back with copy_ (npu_triton_heuristics.py, "
    "_wrap_launcher_with_downcast), into an output buffer whose elements overlap (an expand's stride 0): copy_ "
    "refuses it"
)
# The same write-back in 2.13.0rc1 (line 1484), 2.13.0 and 2.14.0 (line 1676).
WRITE_BACK_OVERLAPPING = KnownFailure(
    WRITE_BACK_REASON, npu_backend="triton_experimental", torch_npu=">=2.13.0,<=2.14.0"
)


def expanded(x):
    return x.expand(5, 5, 5)


@case(
    tags=("found", "torch_npu", "int64"),
    dtypes=(torch.int64,),
    modes=("inference",),
    issue=WRITE_BACK_ISSUE,
    known_failures=(WRITE_BACK_OVERLAPPING,),
)
def found_torch_npu_launcher_write_back_overlapping(dtype):
    """x.expand(5, 5, 5) of an int64 (5, 1, 1) input: the kernel's output buffer keeps stride 0, and the launcher's
    write-back of its narrowed copy into it raises."""
    return Program(expanded, [contiguous((5, 1, 1), dtype=dtype, fill="randint", low=-100, high=100)])
