"""Emulations and faults on CPU Inductor, with exact expected figures."""

import json
import math

import pytest
import torch

from harness import records as R
from harness.inject.launch import parse_injection
from harness.inputs import contiguous, gapped
from harness.registry import Case, Program, load_registry
from harness.run.case import RunConfig, run_case

CASES = load_registry().cases
DENSE_LAYOUTS = [
    "layout_input_contiguous",
    "layout_input_permuted",
    "layout_input_storage_offset",
    "layout_output_inplace_permuted",
]
BROKEN_BY_COLLAPSE = [
    "layout_input_gapped_slice",
    "layout_input_broadcast_rows",
    "layout_input_overlapping",
    "layout_output_inplace_gapped",
    "layout_output_index_put_gapped",
    "layout_output_slices_of_one_buffer",
]


def run(name, dtype, inject):
    return run_case(CASES[name], dtype, "inference", RunConfig(inject=inject))


def test_boundary_downcast_reproduces_the_seed_figures():
    record = run("seed_index_as_strided_view", torch.int64, "boundary-downcast")
    (out,) = record.outputs
    assert record.status == R.FAIL and record.emulation == "boundary-downcast"
    assert (out.bad, out.numel, out.max_abs, out.actual_max) == (2260992, 2359296, 589824, 589823)
    assert record.diagnosis.startswith("layout:")
    assert record.injection_stats.non_dense_args >= 1
    assert "(emulation: boundary-downcast)" in record.summary()


def test_boundary_downcast_leaves_int32_alone():
    record = run("seed_index_as_strided_view", torch.int32, "boundary-downcast")
    assert record.status == R.PASS and record.outputs[0].bad == 0
    assert record.injection_stats.converted_args == 0


@pytest.mark.parametrize("name", DENSE_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_collapsing_conversion_keeps_dense_layouts_correct(name, dtype):
    record = run(name, dtype, "boundary-downcast")
    assert record.status == R.PASS, record.summary()
    assert all(o.bad == 0 for o in record.outputs)


@pytest.mark.parametrize("name", BROKEN_BY_COLLAPSE)
def test_collapsing_conversion_breaks_non_dense_int64(name):
    record = run(name, torch.int64, "boundary-downcast")
    assert record.status == R.FAIL and record.diagnosis.startswith("layout:")


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith(("layout_", "seed_index"))])
def test_strided_conversion_fixes_every_int64_layout(name):
    if torch.int64 not in CASES[name].dtypes:
        pytest.skip("no int64 variant")
    record = run(name, torch.int64, "boundary-downcast-strided")
    assert record.status == R.PASS and all(o.bad == 0 and o.max_abs == 0 for o in record.outputs)


def test_arguments_sharing_a_storage_share_one_conversion_buffer_in_the_fix():
    # block_diag's one kernel writes slices of a buffer through some arguments and reads it through another.
    record = run("layout_output_slices_of_one_buffer", torch.int64, "boundary-downcast-strided")
    assert record.status == R.PASS and record.outputs[0].bad == 0
    assert record.injection_stats.aliased_args >= 2


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if n.startswith("layout_") and torch.float64 in c.dtypes])
def test_strided_conversion_leaves_float64_with_rounding_only(name):
    record = run(name, torch.float64, "boundary-downcast-strided")
    assert any(o.max_abs > 0 for o in record.outputs), "float32 rounding should be visible"
    # Rounding inputs and results to float32 costs at most two half-ulps (2**-24 each) of relative error.
    assert all(o.max_rel <= 2**-22 for o in record.outputs)
    assert record.diagnosis.startswith("precision narrowing, not layout")


def test_narrowing_is_real_int64_wraps():
    big = Case(
        name="big",
        build=lambda d: Program(lambda x: x + 1, [contiguous((4,), fill="arange", low=2**31)]),
        dtypes=(torch.int64,),
    )
    record = run_case(big, torch.int64, "inference", RunConfig(inject="boundary-downcast-strided"))
    (out,) = record.outputs
    assert out.bad == 4 and out.max_abs == 2**32  # 2**31 + i wraps to -2**31 + i


# Faults, on one kernel computing x + 1 over arange(8) = [1, 2, ..., 8].
ADD_ONE = Case(name="add_one", build=lambda d: Program(lambda x: x + 1, [contiguous((8,), fill="arange")]))
GAPPED_ADD_ONE = Case(
    name="gapped_add_one", build=lambda d: Program(lambda x: x + 1, [gapped((8,), step=2, fill="arange")])
)


@pytest.mark.parametrize(
    "fault, bad, max_abs, nan_mismatch",
    [
        ("fault-scale@0", 8, 8.0, 0),  # 2 * (x + 1): off by x + 1, at most 8
        ("fault-offset@0", 8, 1.0, 0),  # x + 2
        ("fault-zero-tail@0", 4, 8.0, 0),  # [1, 2, 3, 4, 0, 0, 0, 0]
        ("fault-nan@0", 1, math.inf, 1),  # [nan, 2, ...]: a NaN where eager is finite is infinitely off
        ("fault-scale@cpp_fused_*", 8, 8.0, 0),
    ],
)
def test_fault_figures(fault, bad, max_abs, nan_mismatch):
    record = run_case(ADD_ONE, torch.float32, "inference", RunConfig(inject=fault))
    (out,) = record.outputs
    assert (out.bad, out.max_abs, out.nan_mismatch) == (bad, max_abs, nan_mismatch)
    assert record.injection_stats.launches == 1 and len(record.injection_stats.hits) == 1


def test_stride_collapse_fault_misreads_a_gapped_input():
    # x = [0, 2, ..., 14] (storage 0..15, step 2); the dense copy read with stride 2 gives
    # [0, 4, 8, 12] then zeros past its end, so out = [1, 5, 9, 13, 1, 1, 1, 1] vs [1, 3, ..., 15].
    record = run_case(GAPPED_ADD_ONE, torch.float32, "inference", RunConfig(inject="fault-stride-collapse@0"))
    (out,) = record.outputs
    assert (out.bad, out.max_abs) == (7, 14.0)


@pytest.mark.parametrize(
    "fault, said",
    [
        (
            "fault-offset@1",
            "fault-offset@1: @1 selected none of the 1 kernel launches (there is no launch 1: "
            "launches count from 0 to 0)",
        ),
        (
            "fault-scale@7",
            "fault-scale@7: @7 selected none of the 1 kernel launches (there is no launch 7: "
            "launches count from 0 to 0)",
        ),
        (
            "fault-scale@*relu*",
            "fault-scale@*relu*: @*relu* selected none of the 1 kernel launches (no kernel "
            "launched is named like '*relu*')",
        ),
    ],
)
def test_a_fault_that_hits_nothing_is_an_error_not_a_pass(fault, said):
    record = run_case(ADD_ONE, torch.float32, "inference", RunConfig(inject=fault))
    assert (record.status, record.stage, record.symptom) == (R.ERROR, R.Stage.COMPILE, R.Symptom.INJECTION_MISSED)
    assert record.error.type == "InjectionMissed" and record.error.message == said
    assert record.injection_stats.launches == 1 and record.injection_stats.hits == []
    assert record.emulation == fault and said in record.summary()


def test_the_launcher_emulation_misses_only_a_program_without_generated_kernels():
    # mm alone is a library call: the NPU launcher converts the arguments of generated kernels only.
    matmul_only = Case(name="mm_only", build=lambda d: Program(torch.mm, [contiguous((4, 4)), contiguous((4, 4))]))
    record = run_case(matmul_only, torch.float64, "inference", RunConfig(inject="boundary-downcast"))
    assert (record.status, record.symptom) == (R.ERROR, R.Symptom.INJECTION_MISSED), record.summary()
    assert "no generated kernel was launched (1 launches, all library calls)" in record.error.message
    # A generated kernel without 64-bit arguments is a launch the launcher handles, converting nothing.
    record = run_case(ADD_ONE, torch.float32, "inference", RunConfig(inject="boundary-downcast"))
    assert record.status == R.PASS and record.injection_stats.converted_args == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("boundary-upcast", "unknown injection"),
        ("fault-scale", "needs a kernel"),
        ("boundary-downcast@3", "takes no @selector"),
    ],
)
def test_bad_injection_names(text, message):
    with pytest.raises(ValueError, match=message):
        parse_injection(text)


def test_injection_stats_are_typed_and_keep_their_json_keys():
    record = run("seed_index_as_strided_view", torch.int64, "boundary-downcast")
    written = json.loads(json.dumps(record.to_dict()))["injection_stats"]
    assert set(written) == {"launches", "converted_args", "non_dense_args", "aliased_args"}  # no null counts
    read = R.CaseResult.from_dict(record.to_dict()).injection_stats
    assert isinstance(read, R.InjectionStats) and read == record.injection_stats


def test_boundary_downcast_leaves_what_the_kernels_own_launcher_narrows_to_it():
    # torch_npu's launcher narrows the arguments its codegen put in `triton_meta["downcast_args"]` itself
    # (`npu_triton_heuristics._wrap_launcher_with_downcast`): the emulation must not convert those again.
    from harness.inject.launch import BoundaryDowncast
    from harness.inductor_compat.launches import KernelInfo, Launch

    seen = []
    kernel = KernelInfo(
        "triton_unk_fused_index_0",
        "triton",
        ["in_ptr0", "in_ptr1", "out_ptr0"],
        launcher_narrowed={"in_ptr0": "*i64"},
    )
    args = [torch.arange(4, dtype=torch.int64), torch.arange(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int64)]

    def invoke(*passed, **kwargs):
        seen.extend(t.dtype if t.data_ptr() == a.data_ptr() else "converted" for t, a in zip(passed, args))
        passed[2].copy_(passed[0] + passed[1])

    emulation = BoundaryDowncast(keep_layout=False)
    emulation(Launch(kernel, 0, list(args), {}, invoke))
    assert seen == [torch.int64, "converted", "converted"]  # in_ptr0 is the launcher's to narrow
    assert emulation.stats.launcher_narrowed == ["0:triton_unk_fused_index_0:in_ptr0"]
    assert emulation.stats.converted_args == 2 and torch.equal(args[2], torch.arange(4) * 2)


def test_a_kernels_launcher_narrowing_is_read_from_its_triton_meta():
    from harness.inductor_compat import launches

    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    autotuner = heuristics.CachingAutotuner.__new__(heuristics.CachingAutotuner)
    autotuner.triton_meta = {
        "signature": {"in_ptr0": "*i32", "out_ptr0": "*fp32", "xnumel": "i32"},
        "downcast_args": {"in_ptr0": "*i64"},
    }
    autotuner.inductor_meta, autotuner.fn = {}, type("Fn", (), {"arg_names": ["in_ptr0", "out_ptr0", "xnumel"]})()
    info = launches._kernel_info("triton_unk_fused_0", autotuner, {}, "module.py")
    assert info.kind == "triton" and info.launcher_narrowed == {"in_ptr0": "*i64"}


def test_a_store_past_the_end_is_refused_where_no_memory_checker_stops_it():
    # CPU Inductor's kernels run unchecked: the store would write the heap. (On the surrogate's checked modes it is a
    # failure naming the kernel: tests/test_npu_path.py.)
    record = run("layout_input_contiguous", torch.float32, "fault-store-past-end@0")
    assert record.status == R.ERROR and record.stage == "compile", record.summary()
    assert "fault-store-past-end@0 needs a device whose memory accesses are checked" in record.error.message
    assert "on cpu the store would write memory no buffer owns" in record.error.message
