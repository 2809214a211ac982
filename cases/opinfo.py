"""Every op, every layout: torch's OpInfo database (op_db) as a source of cases.

Generated on demand (`harness/opinfo/`): one case per op variant, dtype,
sample and layout, named `opinfo-<op>[-<variant>]-<dtype>-s<index>-<layout>`
and tagged `opinfo`, the op's name and the layout. `--tag opinfo` runs the
`ci` sample (about 200 runs, one case per op); with `--full`, the whole sweep.
Needs the `expecttest` package: `pip install -e '.[opinfo]'`.

`KNOWN_FAILURES` below: what fails on CPU (the ci sample and the full sweep),
what CUDA shards of the full sweep showed, and what the ci sample showed through
torch_npu's own compiler (the surrogate NPU), each with its issue.
`ROUNDING` below: the ops whose differences were decided to be rounding, and why.
"""

import torch

from harness import KnownFailure, Tolerance
from harness.opinfo import EVERY_OP, OpFailure, OpTolerance, opinfo_source

UNREPORTED_CONJ = "cases/upstream/issue_new_fft_conj_view_copy.py (new; not yet reported upstream)"
UNREPORTED_SPLIT = "cases/upstream/issue_new_split_overlapping_input_grad.py (new; not yet reported upstream)"
UNREPORTED_SCATTER_BROADCAST = (
    "cases/upstream/issue_new_as_strided_scatter_broadcast_input.py (new; not yet reported upstream)"
)
UNREPORTED_SCATTER_OFFSET = (
    "cases/upstream/issue_new_as_strided_scatter_input_offset.py (new; not yet reported upstream)"
)
UNREPORTED_COPY_OFFSET = "cases/upstream/README.md, Notes: as_strided_copy (new; not yet reported upstream)"
UNREPORTED_COMPLEX_TRITON = "cases/upstream/README.md, Notes: complex64 in Triton (new; not yet reported upstream)"
UNREPORTED_INDEX_FILL = "cases/upstream/README.md, Notes: index_fill (new; not yet reported upstream)"

KNOWN_FAILURES = (
    # torch.view_copy is decomposed into view().clone(): a layout `view` cannot take (expanded, permuted,
    # overlapping) fails in FakeTensor/the decomposition, eager's reshape fallback copies.
    OpFailure(
        "view_copy",
        "https://github.com/pytorch/pytorch/issues/191136",
        KnownFailure(
            "view_copy of a layout view() cannot take: the decomposition lacks eager's reshape fallback "
            "(pytorch#191136, fix #191480)",
            device="cpu",
            torch="2.13",
        ),
        layouts=("permuted", "broadcast", "overlapping"),
    ),
    # ihfft = conj(r2c FFT): the lazy conjugate view of a non-contiguous fallback result is copied to the
    # output without conjugating. The full sweep shows ifft too (its compiled result is the conjugate of eager's
    # on a permuted input, every dtype that runs).
    *(
        OpFailure(
            op,
            UNREPORTED_CONJ,
            KnownFailure(
                f"the conjugate view of a non-contiguous FFT result is copied without conjugating ({UNREPORTED_CONJ})",
                device="cpu",
                torch="2.13",
            ),
            layouts=("permuted",),
        )
        for op in ("fft.ihfft", "fft.ifft")
    ),
    # The pooling lowerings decode the window offset argmax returns as row-major, but the reduction's loop order
    # follows the input's strides: on an input whose spatial dims are not in row-major memory order the indices
    # come out with the window's dims swapped (the values are right). Found by the full sweep.
    OpFailure(
        "nn.functional.max_pool3d",
        "https://github.com/pytorch/pytorch/issues/197434",
        KnownFailure(
            "max_pool3d indices of an input whose spatial dims are not in row-major memory order "
            "(pytorch#197434, fix #197596)",
            device="cpu",
            torch="2.13",
        ),
        layouts=("permuted",),
    ),
    # as_strided_scatter of an expanded input keeps its stride-0 layout (rows alias; OpInfo's sample writes past
    # them: int64 corrupted the heap and killed its worker). Its floating samples of that layout are skipped.
    *(
        OpFailure(
            "as_strided_scatter",
            UNREPORTED_SCATTER_BROADCAST,
            KnownFailure(
                f"as_strided_scatter of an expanded input ({UNREPORTED_SCATTER_BROADCAST})",
                device="cpu",
                dtype=dtype,
                torch="2.13",
            ),
            layouts=("broadcast",),
            samples=(2,),
        )
        for dtype in ("int64", "int32", "bool")
    ),
    # as_strided_scatter on an input with a storage offset counts storage_offset from the input's first element
    # (caches off too). bool is left out: its sample scatters the value the element already holds.
    *(
        OpFailure(
            "as_strided_scatter",
            UNREPORTED_SCATTER_OFFSET,
            KnownFailure(
                f"as_strided_scatter of an input with a storage offset ({UNREPORTED_SCATTER_OFFSET})",
                device="cpu",
                dtype=dtype,
                torch="2.13",
            ),
            layouts=("storage_offset",),
            samples=(0,),
        )
        for dtype in ("float32", "bfloat16", "float16", "int64", "int32")
    ),
    # as_strided with an explicit storage offset bakes the input's offset into the compiled code, and neither
    # Dynamo nor the FX graph cache key guards on it: whichever of the contiguous and the storage-offset sample
    # compiles first (in any process sharing the cache) makes the other read the wrong element. Not strict:
    # which runs fail depends on the order.
    OpFailure(
        "as_strided_copy",
        UNREPORTED_COPY_OFFSET,
        KnownFailure(
            f"as_strided_copy: the input's storage offset is baked into compiled code no cache key "
            f"holds ({UNREPORTED_COPY_OFFSET})",
            device="cpu",
            torch="2.13",
            strict=False,
        ),
        layouts=("contiguous", "storage_offset"),
        samples=(0,),
    ),
    # The outputs of split() and its kin are views of the input; AOTAutograd regenerates them from the input's
    # storage, so with an overlapping input the input gradient sums over shared addresses (aot_eager already
    # differs). The full sweep shows the whole family (dsplit, hsplit and unbind samples agree).
    *(
        OpFailure(
            op,
            UNREPORTED_SPLIT,
            # No device: AOT autograd's, whatever the device (the surrogate NPU's runs fail the same way, in
            # both torch_npu backends and the surrogate's own modes); CUDA's torch 2.11 is not declared.
            KnownFailure(
                f"input gradient of {op} outputs of an overlapping input ({UNREPORTED_SPLIT})",
                mode="training",
                torch="2.13",
            ),
            layouts=("overlapping",),
        )
        for op in ("split", "split.list_args", "split_with_sizes", "chunk", "unsafe_chunk", "unsafe_split")
    ),
    # CUDA, torch 2.11: seen in two 1/32 shards of the full sweep on an H200 (2026-12-01), one dtype and mode
    # each, so not strict: the other dtypes and modes of these layouts were not run there.
    OpFailure(
        "view_copy",
        "https://github.com/pytorch/pytorch/issues/191136",
        KnownFailure(
            "view_copy of a layout view() cannot take (pytorch#191136); seen on CUDA in int32 and bool",
            device="cuda",
            torch="2.11",
            strict=False,
        ),
        layouts=("permuted", "broadcast", "overlapping"),
    ),
    OpFailure(
        "nn.functional.max_pool3d",
        "https://github.com/pytorch/pytorch/issues/197434",
        KnownFailure(
            "max_pool3d indices of an input whose spatial dims are not in row-major memory order "
            "(pytorch#197434); seen on CUDA in bfloat16 training",
            device="cuda",
            torch="2.11",
            strict=False,
        ),
        layouts=("permuted",),
    ),
    # Triton's fp32 a / b is not IEEE-rounded: floor() of an exact integer quotient can land one below.
    OpFailure(
        "floor_divide",
        "https://github.com/pytorch/pytorch/issues/197895",
        KnownFailure(
            "floor_divide computed as floor(a / b) with a non-IEEE division (pytorch#197895 and "
            "#177740); seen on CUDA in bfloat16",
            device="cuda",
            torch="2.11",
            strict=False,
        ),
    ),
    # CUDA, torch 2.11, H200 (2026-12-02): every sample of these ops and layouts (all dtypes, both modes) run there.
    # The stride-0 scatter class: the compiled output keeps the expanded input's stride-0 layout, rows aliased;
    # localization names the kernel that wrote it and the strides of both sides.
    *(
        OpFailure(
            op,
            UNREPORTED_SCATTER_BROADCAST,
            KnownFailure(
                f"{op} of an expanded input returns a stride-0 output, rows aliased "
                f"({UNREPORTED_SCATTER_BROADCAST}); seen on CUDA",
                device="cuda",
                torch="2.11",
            ),
            layouts=("broadcast",),
            samples=samples,
        )
        for op, samples in (("select_scatter", None), ("slice_scatter", None), ("as_strided_scatter", (2,)))
    ),
    # bool is left out, as on CPU: its sample scatters the value the element already holds (it passes).
    *(
        OpFailure(
            "as_strided_scatter",
            UNREPORTED_SCATTER_OFFSET,
            KnownFailure(
                f"as_strided_scatter of an input with a storage offset ({UNREPORTED_SCATTER_OFFSET}); seen on CUDA",
                device="cuda",
                dtype=dtype,
                torch="2.11",
            ),
            layouts=("storage_offset",),
            samples=(0,),
        )
        for dtype in ("float32", "bfloat16", "float16", "int64", "int32")
    ),
    # A complex64 tensor passed to a generated Triton kernel: Inductor's Triton signature has no type for it
    # (`torch/_inductor/utils.py` `_type_of`: KeyError 'complex64'), a compile error. The FFTs' non-contiguous
    # (permuted) inputs and view_as_complex of an expanded input reach a pointwise kernel with a complex argument.
    # float16 FFTs give complex32, which takes another path: they pass, and are left out.
    *(
        OpFailure(
            op,
            UNREPORTED_COMPLEX_TRITON,
            KnownFailure(
                f"a complex64 argument of a generated Triton kernel: no Triton type for it "
                f"({UNREPORTED_COMPLEX_TRITON}); seen on CUDA",
                device="cuda",
                dtype=dtype,
                torch="2.11",
            ),
            layouts=layouts,
        )
        for op, layouts, dtypes in (
            *(
                (fft, ("permuted",), ("float32", "int64", "int32", "bool"))
                for fft in ("fft.fft", "fft.ifft", "fft.ihfft", "fft.rfft")
            ),
            ("view_as_complex", ("broadcast",), (None,)),
        )
        for dtype in dtypes
    ),
    # The same for complex32 (shards 27 and 29 on an H100): chalf of a float16 input, overlapping or permuted, stops
    # its compile at KeyError: 'complex32'. Not strict: other layouts were not reached.
    OpFailure(
        "chalf",
        UNREPORTED_COMPLEX_TRITON,
        KnownFailure(
            f"a complex32 value in a generated Triton kernel: no Triton type for it ({UNREPORTED_COMPLEX_TRITON}); "
            "seen on CUDA",
            device="cuda",
            dtype="float16",
            torch="2.11",
            strict=False,
        ),
        layouts=("overlapping", "permuted"),
    ),
    # A gradient the program rounds to bfloat16 (aten._to_copy float64 -> bfloat16) that a graph pass removes, so
    # the compiled backward keeps float32: with emulate_precision_casts=True it matches eager (the run's own
    # diagnosis, shard 25 on an H100). Declared as that class alone.
    OpFailure(
        "_unsafe_masked_index",
        "docs/localization.md, an explicit cast to lower precision elided (emulate_precision_casts)",
        KnownFailure(
            "_unsafe_masked_index's backward in bfloat16: an explicit cast to bfloat16 elided, the gradient kept in "
            "float32; seen on CUDA",
            device="cuda",
            dtype="bfloat16",
            mode="training",
            torch="2.11",
            symptom="precision-cast-elided",
            strict=False,
        ),
        layouts=("contiguous",),
    ),
    OpFailure(
        "as_strided_copy",
        UNREPORTED_COPY_OFFSET,
        KnownFailure(
            f"as_strided_copy: the input's storage offset is baked into compiled code no cache key "
            f"holds ({UNREPORTED_COPY_OFFSET}); seen on CUDA",
            device="cuda",
            torch="2.11",
            strict=False,
        ),
        layouts=("contiguous", "storage_offset"),
        samples=(0,),
    ),
    # index_fill of a non-contiguous input (sample 4: a 0-dim value over a permuted, gapped, expanded or
    # overlapping input): Inductor's reinplacing asserts on the copy_ into the permuted empty it makes for the
    # result ("AssertionError: n=copy_, n.args[0]=permute"), every dtype and mode: a compile error, no result.
    OpFailure(
        "index_fill",
        UNREPORTED_INDEX_FILL,
        KnownFailure(
            "index_fill of a non-contiguous input: the compile asserts in reinplacing (copy_ into a "
            "permuted empty); seen on CUDA",
            device="cuda",
            torch="2.11",
        ),
        layouts=("permuted", "gapped", "broadcast", "overlapping"),
        samples=(4,),
    ),
    # The compiled output keeps the expanded input's stride-0 layout (rows alias), as as_strided_scatter's does.
    OpFailure(
        "diagonal_scatter",
        UNREPORTED_SCATTER_BROADCAST,
        KnownFailure(
            f"diagonal_scatter of an expanded input returns a stride-0 output, rows aliased "
            f"({UNREPORTED_SCATTER_BROADCAST}); seen on CUDA in bfloat16",
            device="cuda",
            torch="2.11",
            strict=False,
        ),
        layouts=("broadcast",),
    ),
)

# torch_npu's own compiler (the surrogate NPU's torch_npu mode, torch-npu 2.13.0 to 2.14.0, `triton_experimental`):
# what the OpInfo ci sample through it showed, each confirmed in torch_npu's source (docs/npu.md, the sweep's table).
TORCH_NPU = ">=2.13.0,<=2.14.0"
SEED_NARROWING = (
    "torch_npu Inductor (triton_experimental) report, seed 000: the launcher narrows int64 arguments with "
    "Tensor.to() (npu_triton_heuristics.py, _wrap_launcher_with_downcast)"
)
VIEW_UPDATE_DROPPED = "docs/found/torch_npu_as_strided_update_dropped.md (found by this harness, on the CPU surrogate)"
KNOWN_FAILURES += (
    # Seed 000's bug in other ops: an int64 input that is not dense, narrowed by the launcher to a dense copy the
    # kernel still addresses with its compile-time strides (each answered so by --bisect, on that argument).
    *(
        OpFailure(
            op,
            SEED_NARROWING,
            KnownFailure(
                f"{op} of a non-dense int64 input: torch_npu's launcher narrows it with Tensor.to() to a dense copy "
                "the kernel addresses with the input's strides (seed 000)",
                npu_backend="triton_experimental",
                torch_npu=TORCH_NPU,
                dtype="int64",
            ),
            layouts=layouts,
        )
        for op, layouts in (
            ("ge", ("overlapping",)),
            ("dot", ("gapped",)),
            ("nansum", ("gapped",)),
            # (the full sweep's 1% sample)
            ("fmin", ("overlapping",)),
            ("maximum", ("overlapping",)),
            # (found beside the int64 min/max reductions below) the memory checker stops the kernel's load of
            # element 2 of in_ptr0, an 8-byte buffer: the dense int32 copy of the two-element gapped input it
            # addresses with stride 2
            ("masked.amax", ("gapped",)),
            ("masked.amin", ("gapped",)),
            # The same stop at element 20 of the dense copy (80 bytes) of a 20-element gapped input, in a
            # select-lane load (`in_ptr0 + (0 + 2 * x0offset + _es_slane0)`), which would read one past the
            # input's span even with its layout kept (docs/found/torch_npu_select_lane_overread.md)
            ("nan_to_num", ("gapped",)),
            # (the sweep's sample --shard 3/200) the memory checker stops `tl.load(in_ptr0 + (6))`: byte 24 of the
            # 20-byte dense int32 copy of a five-element gapped input
            ("vdot", ("gapped",)),
        )
    ),
    # Upstream Inductor's classes, seen in the torch_npu mode's sweep sample (--shard 3/200, float32 training) as
    # on CUDA: view_copy's decomposition (pytorch#191136) and complex32 in a Triton kernel (chalf's backward).
    # Declared by backend and release: a declaration naming a device never applies on a surrogate. Not strict:
    # one run each seen.
    OpFailure(
        "view_copy",
        "https://github.com/pytorch/pytorch/issues/191136",
        KnownFailure(
            "view_copy of a layout view() cannot take (pytorch#191136); seen through torch_npu's triton_experimental",
            npu_backend="triton_experimental",
            torch_npu=TORCH_NPU,
            strict=False,
        ),
        layouts=("permuted", "broadcast", "overlapping"),
    ),
    # (chalf's complex32 in that sample; cfloat's complex64 and cdouble's complex128 in the full sweep.)
    *(
        OpFailure(
            op,
            UNREPORTED_COMPLEX_TRITON,
            KnownFailure(
                f"a {complex_dtype} value in a generated Triton kernel: no Triton type for it "
                f"({UNREPORTED_COMPLEX_TRITON}); seen through torch_npu's triton_experimental",
                npu_backend="triton_experimental",
                torch_npu=TORCH_NPU,
                strict=False,
            ),
            layouts=("overlapping", "permuted"),
        )
        for op, complex_dtype in (("cfloat", "complex64"), ("cdouble", "complex128"), ("chalf", "complex32"))
    ),
    # An update through `aten.diagonal`, which triton_experimental lowers as a fallback, is dropped: both backward
    # programs write into a diagonal view. (The full sweep: householder_product in every layout; diag overlapping
    # too; diagonal_copy's and linalg.qr's backward likewise, in every layout, --bisect naming the dropped copy_
    # into diagonal_default on qr, wrapper_glue on diagonal_copy, as for diagonal_scatter below.)
    *(
        OpFailure(
            op,
            VIEW_UPDATE_DROPPED,
            KnownFailure(
                f"{op}'s backward writes through aten.diagonal, a fallback in torch_npu's triton_experimental: the "
                "update is dropped",
                npu_backend="triton_experimental",
                torch_npu=TORCH_NPU,
                mode="training",
                strict=False,  # (most layouts seen in one sweep, once each)
            ),
            layouts=layouts,
        )
        for op, layouts in (
            ("linalg.householder_product", None),
            ("diag", ("permuted", "overlapping")),
            ("diagonal_copy", None),
            ("linalg.qr", None),
            ("qr", None),  # (the same backward: --bisect names the dropped copy_ into diagonal_default)
        )
    ),
    # The same through `aten.as_strided`: as_strided_copy's backward (an as_strided_scatter into zeros; --bisect
    # names the dropped copy_ into as_strided_default), and as_strided_scatter itself (answered wrapper_glue).
    *(
        OpFailure(
            op,
            VIEW_UPDATE_DROPPED,
            KnownFailure(
                f"{op} writes through aten.as_strided, a fallback in torch_npu's triton_experimental: the update is "
                "dropped",
                npu_backend="triton_experimental",
                torch_npu=TORCH_NPU,
                mode=mode,
                strict=False,
            ),
        )
        for op, mode in (("as_strided_copy", "training"), ("as_strided_scatter", None))
    ),
    # diagonal_scatter is that update itself (a clone, its diagonal view, a copy_ into it): every dtype, layout and
    # mode, the 10 diagonal elements of a 10 x 10 result. --bisect names the dropped copy_ (inductor_lowering) on
    # a contiguous input; on a storage offset and in dynamic runs it answers wrapper_glue.
    OpFailure(
        "diagonal_scatter",
        VIEW_UPDATE_DROPPED,
        KnownFailure(
            "diagonal_scatter writes through aten.diagonal, a fallback in torch_npu's triton_experimental: the "
            "update is dropped",
            npu_backend="triton_experimental",
            torch_npu=TORCH_NPU,
        ),
    ),
)

# An int64 min/max reduction's start value (2**63 - 1, typed tl.int32 by the demotion) does not compile.
IDENTITY_NARROWED = (
    "docs/found/torch_npu_int64_reduction_identity_narrowed.md (found by this harness, on the CPU surrogate)"
)
# Seen in the sweep for aminmax; amin, amax and max over a dim fail the same way in a plain script. Not strict: a
# sample that reduces every element takes another path and compiles.
KNOWN_FAILURES += tuple(
    OpFailure(
        op,
        IDENTITY_NARROWED,
        KnownFailure(
            f"{op} of int64: torch_npu types a min/max accumulator tl.int32 and starts it at int64's bound, "
            "tl.full(..., 9223372036854775807, tl.int32), which does not compile",
            npu_backend="triton_experimental",
            torch_npu=TORCH_NPU,
            dtype="int64",
            strict=False,
        ),
    )
    for op in (
        "aminmax",
        "amin",
        "amax",
        "max.reduction_with_dim",
        "min.reduction_with_dim",
        # (the full sweep: the max of every element, int64's lowest bound typed tl.int32)
        "max.reduction_no_dim",
        "min.reduction_no_dim",
    )
)

OVERREAD = "docs/found/torch_npu_select_lane_overread.md (found by this harness, on the CPU surrogate)"
KNOWN_FAILURES += (
    # The select-lane rewrite's widened load: its mask leaves the row's base out, and the last block reads past the
    # input's end (`in_ptr0 + (2 + 520 * x2 + 4 * x0offset + _es_slane0)` under
    # `(4*x0offset + _es_slane0) < 4*x0numel`).
    OpFailure(
        "grid_sampler_2d",
        OVERREAD,
        KnownFailure(
            "grid_sampler_2d of a gapped input: torch_npu's select-lane load reads past its input's end (the "
            "surrogate's memory checker stops it)",
            npu_backend="triton_experimental",
            torch_npu=TORCH_NPU,
            dtype="bfloat16",
        ),
        layouts=("gapped",),
    ),
    # The full sweep's 1% sample: the same widened select-lane load (`_es_sfull`), stopped by the memory checker
    # past its input's end: `in_ptr0 + (1 + 16 * x2 + 2 * x1offset + _es_slane1)` (the row's base left out of the
    # mask), and `in_ptr0 + (0 + 2 * x0offset + _es_slane0)` 4 bytes past an 8-byte input.
    *(
        OpFailure(
            op,
            OVERREAD,
            KnownFailure(
                f"{op}: torch_npu's select-lane load reads past its input's end (the surrogate's memory checker "
                "stops it)",
                npu_backend="triton_experimental",
                torch_npu=TORCH_NPU,
                dtype="float32",
                mode=mode,
            ),
            layouts=(layout,),
        )
        for op, layout, mode in (
            ("nn.functional.max_unpool1d.grad", "gapped", None),
            ("repeat_interleave", "permuted", "training"),
        )
    ),
)

# A min or max of bool operands: torch_npu emits tl.minimum/tl.maximum, which triton-ascend refuses for int1 (the
# full sweep: every bool run of these six ops, every layout).
BOOL_MINIMUM = "docs/found/torch_npu_bool_minimum.md (found by this harness, on the CPU surrogate)"
KNOWN_FAILURES += tuple(
    OpFailure(
        op,
        BOOL_MINIMUM,
        KnownFailure(
            f"{op} of bool: torch_npu emits tl.minimum/tl.maximum, which triton-ascend refuses for int1 operands",
            npu_backend="triton_experimental",
            torch_npu=TORCH_NPU,
            dtype="bool",
        ),
    )
    for op in ("clamp_min", "clamp_max", "max.binary", "min.binary", "maximum", "minimum")
)

# An int64 output buffer laid out as an expand (stride 0), narrowed by the launcher and written back with copy_,
# which refuses it (the full sweep: every such run of these four ops).
WRITE_BACK = "docs/found/torch_npu_launcher_write_back_overlapping.md (found by this harness, on the CPU surrogate)"
KNOWN_FAILURES += tuple(
    OpFailure(
        op,
        WRITE_BACK,
        KnownFailure(
            f"{op} of int64: torch_npu's launcher writes the narrowed output back with copy_ into a buffer whose "
            "elements overlap (stride 0), which copy_ refuses",
            npu_backend="triton_experimental",
            torch_npu=TORCH_NPU,
            dtype="int64",
            strict=False,
        ),
        layouts=("contiguous", "permuted", "broadcast", "storage_offset"),
    )
    for op in ("expand", "expand_as", "broadcast_to", "broadcast_tensors")
)

# The same two bugs as classes, on every op, by the mechanism the run itself shows (a record's `mechanism`): a
# failure of any op that a rerun pins on the launcher's Tensor.to() copy of a non-dense 64-bit argument
# (`harness/run/launcher_narrowing.py`), and a memory checker's stop, with every layout kept, in a load of the
# select-lane rewrite or of its sibling (`_es_sfull`, `_es_full`: `torch_npu_backend.REWRITTEN_LOADS`). The full
# sweep found each in over a hundred ops; a declaration by op would name only those. Not strict: it matches
# failing runs alone (the op-by-op declarations above keep their strictness).
KNOWN_FAILURES += (
    OpFailure(
        EVERY_OP,
        SEED_NARROWING,
        KnownFailure(
            "a non-dense int64 argument: torch_npu's launcher narrows it with Tensor.to() to a dense copy the kernel "
            "addresses with its strides (seed 000; shown by this run's rerun)",
            npu_backend="triton_experimental",
            torch_npu=TORCH_NPU,
            mechanism="launcher-narrowing",
            strict=False,
        ),
    ),
    *(
        OpFailure(
            EVERY_OP,
            OVERREAD,
            KnownFailure(
                f"torch_npu's {rewrite} load reads past its input's end (the surrogate's memory checker stops it, "
                "every layout kept)",
                npu_backend="triton_experimental",
                torch_npu=TORCH_NPU,
                mechanism=f"{mechanism}-load",
                strict=False,
            ),
        )
        for rewrite, mechanism in (("select-lane", "select-lane"), ("widened select", "extract-slice"))
    ),
)

# Differences decided to be rounding, each with its reasoning.
ROUNDING = (
    # tan float16, training (H200, torch 2.11; sample 0, storage_offset): 1 of 400 gradient elements 2 float16 ulps
    # off (0.43994 for 0.43945), and 2842 for 2840 (1 ulp) at the largest. The gradient is grad * (1 + y^2) with
    # y = tan(x) saved in float16 by the forward. Eager rounds y^2, 1 + y^2 and the product each to float16 (three
    # roundings of up to half an ulp); Inductor computes the three in float32 and rounds once: up to 2 ulps apart
    # from rounding alone. The float64 reference cannot rank them at that level: it recomputes tan(x) unrounded,
    # while both sides share the float16 y, whose half-ulp rounding (1 + y^2 amplifies it by 2y^2 / (1 + y^2),
    # close to 2 near the pole) is of the same size. So it is rounding, not a compiler bug: 2 ulps of float16.
    OpTolerance(
        "tan",
        torch.float16,
        Tolerance(rtol=2e-3, atol=1e-5),
        "2 float16 ulps: the backward's three float16 roundings in eager against one in Inductor",
    ),
)

CASE_SOURCES = [opinfo_source(KNOWN_FAILURES, ROUNDING)]
