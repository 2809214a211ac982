"""triton-ascend's silent wrong-result classes (harness/bug_classes), emulated on CPU: each hits its family
(`cases/ascend_bug_classes.py`) and fails it, the family passes without it, its controls are
`injection-missed`; and the kernel transformations behind the two reduction classes, on kernels as Inductor
writes them (Triton source generated without a GPU)."""

import pytest
import torch

from harness import records as R
from harness.inject.ascend.scalars import arrives_as
from harness.inject.ascend.stores import memory_order
from harness.inject.launch import injection_named
from harness.inductor_compat.padding_variants import (
    cpp_masked_load_garbage,
    cpp_reduction_small_inner,
    triton_masked_load_garbage,
    triton_reduction_small_inner,
)
from harness.registry import load_registry
from harness.run.case import RunConfig, run_case

from generated_kernels import generated_cpp_kernels, generated_triton_kernels

CLASSES = (
    "first-launch-dropped-stores",
    "masked-store-lost",
    "half-scalar-arg",
    "reduction-small-inner",
    "masked-load-garbage",
)


def _family(injection, role):
    cases = [c for c in load_registry().cases.values() if injection in c.tags and role in c.tags]
    assert cases, f"no {role} case for {injection}"
    return cases


def _run(case, **config):
    return run_case(case, case.dtypes[0], case.modes[0], RunConfig(**config))


@pytest.mark.parametrize("injection", CLASSES)
def test_each_class_is_an_emulation_with_its_source(injection):
    found = injection_named(injection)
    assert found.source and found.summary.startswith("emulates")


@pytest.mark.parametrize("injection", CLASSES)
def test_each_class_fails_its_family_and_counts_its_hits(injection):
    for case in _family(injection, "hit"):
        record = _run(case, inject=injection)
        assert record.status == R.FAIL, record.summary()
        assert record.emulation == injection and record.injection_stats.hits, record.summary()
        assert _run(case).status == R.PASS


@pytest.mark.parametrize("injection", CLASSES)
def test_a_control_the_class_leaves_alone_is_injection_missed_not_a_pass(injection):
    controls = [c for c in load_registry().cases.values() if injection in c.tags and "control" in c.tags]
    for case in controls:
        record = _run(case, inject=injection)
        assert (record.status, record.symptom) == (R.ERROR, R.Symptom.INJECTION_MISSED), record.summary()
        assert _run(case).status == R.PASS


def test_first_launch_dropped_stores_fails_with_symptom_first_launch():
    case = load_registry().cases["stores_first_launch_row_sums"]
    record = _run(case, inject="first-launch-dropped-stores")
    assert (record.status, record.symptom, record.diverged_runs) == (R.FAIL, R.Symptom.FIRST_LAUNCH, [1, 3])
    # Half of the 48 row sums (the second half in memory) never written.
    assert record.outputs[0].bad == 24


def test_first_launch_dropped_stores_in_training_is_localized_to_a_kernel_it_hit():
    record = run_case(
        load_registry().cases["relu_mlp"],
        torch.float32,
        "training",
        RunConfig(inject="first-launch-dropped-stores", bisect=True),
    )
    assert (record.status, record.symptom) == (R.FAIL, R.Symptom.FIRST_LAUNCH), record.summary()
    found = record.first_divergent_kernel
    assert found.answer == R.Answer.KERNEL, found.line()
    assert f"{found.launch_index}:{found.name}" in record.injection_stats.hits
    assert found.isolated.startswith("kernel is wrong on its first launch"), found.isolated


def test_masked_store_lost_is_a_failure_whose_runs_differ():
    case = load_registry().cases["stores_masked_tail"]
    record = _run(case, inject="masked-store-lost")
    assert record.status == R.FAIL and record.reproduced, record.summary()
    # Both runs lose pairs, each its own: the record says which runs diverged, and that they differ.
    assert (record.symptom, record.diverged_runs) == (R.Symptom.RUN_TO_RUN, [1, 2]), record.summary()
    assert "changes from run to run" in record.diagnosis
    assert record.outputs[0].bad >= 2  # at least one pair lost


def test_masked_store_lost_is_localized_to_the_kernel():
    case = load_registry().cases["stores_masked_tail"]
    record = _run(case, inject="masked-store-lost", bisect=True)
    assert record.status == R.FAIL and record.first_divergent_kernel.answer == R.Answer.KERNEL, record.summary()


@pytest.mark.parametrize("case_name", ["scalar_float16_scale", "columns_k2_sums", "padding_row_sums"])
def test_the_deterministic_classes_are_localized_to_the_kernel_they_hit(case_name):
    case = load_registry().cases[case_name]
    injection = next(tag for tag in case.tags if tag in CLASSES)
    record = _run(case, inject=injection, bisect=True)
    found = record.first_divergent_kernel
    assert (record.status, found.answer) == (R.FAIL, R.Answer.KERNEL), record.summary()
    assert found.isolated.startswith("kernel is wrong"), found.isolated
    assert any(hit.endswith(f":{found.name}") for hit in record.injection_stats.hits)


def test_a_half_scalar_arrives_as_the_low_bits_of_its_float32_encoding():
    # 1.5 is 0x3FC00000: its low 16 bits are 0. 1.2998046875 (a float16) is 0x3FA66000: 0x6000 is 512.0.
    assert arrives_as(1.5, torch.float16) == 0.0
    assert arrives_as(1.2998046875, torch.float16) == 512.0
    # A bfloat16 value is the high half of its float32 encoding: the low half is always zero.
    assert arrives_as(-1.296875, torch.bfloat16) == 0.0


def test_a_half_scalar_spoils_every_element_it_scales():
    record = _run(load_registry().cases["scalar_float16_scale"], inject="half-scalar-arg")
    assert record.outputs[0].bad == 48 * 64
    assert record.injection_stats.hits == ["0:cpp_fused_add_mul_0"]


def test_memory_order_follows_addresses_not_logical_positions():
    t = torch.empty(3, 2).t()  # shape (2, 3), stride (1, 2): logical (i, j) lies at 2*j + i
    assert memory_order(t).tolist() == [0, 3, 1, 4, 2, 5]


# --- the kernel transformations --------------------------------------------------------------------------


def _kernels(fn, *args, triton):
    return (generated_triton_kernels if triton else generated_cpp_kernels)(fn, *args)


def test_triton_garbage_fills_the_masked_lanes_and_elides_the_guard():
    (source,) = _kernels(lambda x: x.sum(-1), torch.randn(64, 20), triton=True).values()
    rewritten = triton_masked_load_garbage(source)
    assert "tl.where(r0_mask & xmask" in source and "tl.where(r0_mask & xmask" not in rewritten
    assert "other=0.0" in source and "other=float('nan')" in rewritten


def test_triton_garbage_leaves_a_reduction_without_masked_lanes_alone():
    (source,) = _kernels(lambda x: x.sum(-1), torch.randn(64, 32), triton=True).values()
    assert triton_masked_load_garbage(source) is None


def test_cpp_garbage_reduces_the_whole_tail_vector():
    (source,) = _kernels(lambda x: x.sum(-1), torch.randn(64, 20), triton=False).values()
    rewritten = cpp_masked_load_garbage(source)
    assert "sum_masked_reduce(tmp_acc0_vec, tmp0, static_cast<int64_t>(4L))" in source
    assert (
        "sum_masked_reduce(tmp_acc0_vec, harness_padding_garbage(tmp0, static_cast<int64_t>(4L)), "
        "harness_all_lanes(tmp0, static_cast<int64_t>(4L)))"
    ) in rewritten


def test_small_inner_rewrites_outer_reductions_of_narrow_kept_axes_only():
    narrow = _kernels(lambda x: x.sum(0), torch.randn(512, 2), triton=False)
    (source,) = narrow.values()
    assert "sum_masked_reduce(tmp_acc0_vec_local, tmp0, static_cast<int64_t>(1L))" in cpp_reduction_small_inner(source)
    # An inner reduction's tail (4 lanes of a row of 20) is not a narrow tile: left alone.
    (inner,) = _kernels(lambda x: x.sum(-1), torch.randn(64, 20), triton=False).values()
    assert cpp_reduction_small_inner(inner) is None
    for source in _kernels(lambda x: x.sum(0), torch.randn(512, 4), triton=True).values():
        rewritten = triton_reduction_small_inner(source)
        assert rewritten is not None and "(x0 < 2)" in rewritten, source
    for source in _kernels(lambda x: x.sum(-1), torch.randn(4, 1000), triton=True).values():
        assert triton_reduction_small_inner(source) is None, source


def test_triton_garbage_reaches_loads_wrapped_in_a_conversion():
    # A float16 min/max reduction loads `tl.load(...).to(tl.float32)`: the load inside is range-masked too.
    (source,) = _kernels(lambda x: torch.aminmax(x), torch.randn(5, 5, dtype=torch.float16), triton=True).values()
    rewritten = triton_masked_load_garbage(source)
    assert "other=float('nan')).to(tl.float32)" in rewritten and "tl.where(r0_mask" not in rewritten
