"""ATen fallbacks and custom ops the wrapper calls (`torch.ops.*`) are launches of their own: probed, numbered
apart from kernel launches (`@aten:N`), their views checked against eager before the call (the wrapper's glue).
The programs are `tests/fallback_cases/fallback_ops.py`."""

import os
from pathlib import Path

import pytest
import torch

from harness import records as R
from harness.inject.launch import parse_injection
from harness.inductor_compat.launches import KIND_FALLBACK, Launch, KernelInfo, _flatten_call, is_fallback_launch
from harness.registry import load_registry
from harness.run.case import RunConfig, run_case

CASE_DIR = str(Path(__file__).resolve().parent / "fallback_cases")


@pytest.fixture(scope="module")
def cases():
    return load_registry([CASE_DIR], include_default=False).cases


def _run(cases, name, mode="inference", **config):
    return run_case(cases[name], torch.float32, mode, RunConfig(**config))


@pytest.mark.parametrize("selector", ["aten:0", "aten:*sort*"])
def test_a_wrong_aten_fallback_is_named_wrong_on_eager_inputs(cases, selector):
    record = _run(cases, "fallback_sort_cumsum", inject=f"fault-scale@{selector}", bisect=True)
    assert record.status == R.FAIL, record.summary()
    found = record.first_divergent_kernel
    assert (found.answer, found.kind, found.name) == (R.Answer.KERNEL, KIND_FALLBACK, "torch.ops.aten.sort.stable")
    assert (found.fallback_index, found.launch_index) == (0, None)
    assert found.isolated.startswith(
        "ATen fallback `aten.sort.stable` (on the NPU: a CANN operator) is wrong: on "
        "eager values of its inputs it still diverges"
    )
    assert "fallback aten:0 torch.ops.aten.sort.stable" in found.line()
    assert record.injection_stats.hits == ["aten:0:torch.ops.aten.sort.stable"]


def test_kernel_launch_numbers_and_selectors_do_not_count_fallbacks(cases):
    record = _run(cases, "fallback_sort_cumsum", bisect="always")
    assert record.status == R.PASS
    log = record.first_divergent_kernel.kernels
    kernels = [e for e in log if e.fallback is None]
    fallbacks = [e for e in log if e.fallback is not None]
    assert (
        [e.index for e in kernels] == list(range(len(kernels))) == list(range(record.first_divergent_kernel.launches))
    )
    assert [(e.fallback, e.name) for e in fallbacks] == [
        (0, "torch.ops.aten.sort.stable"),
        (1, "torch.ops.aten.cumsum.default"),
    ]
    assert all(e.compared for e in fallbacks)
    # `@1` is the second generated kernel, whatever fallbacks come between.
    second = _run(cases, "fallback_sort_cumsum", inject="fault-scale@1", bisect=True)
    assert (second.first_divergent_kernel.launch_index, second.first_divergent_kernel.name) == (1, kernels[1].name)
    assert second.first_divergent_kernel.fallback_index is None


def test_a_custom_op_wrong_on_the_layout_inductor_hands_it_is_named(cases):
    record = _run(cases, "fallback_custom_op_wrong_layout", bisect=True)
    assert record.status == R.FAIL, record.summary()
    found = record.first_divergent_kernel
    assert (found.answer, found.name) == (R.Answer.KERNEL, "torch.ops.harness_fallback_test.double_it.default")
    assert found.isolated.startswith("custom op `harness_fallback_test.double_it.default` is wrong: on eager values")
    (x, result) = found.args
    assert (x.name, x.stride, result.name) == ("x", [1, 8], "result")  # transposed: eager's is contiguous


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_view_the_wrapper_builds_at_the_wrong_offset_names_the_call_the_argument_and_both_layouts(cases, dynamic):
    record = _run(cases, "fallback_view_write", inject="glue-offset-dropped", bisect=True, dynamic=dynamic)
    assert record.status == R.FAIL and record.emulation == "glue-offset-dropped", record.summary()
    found = record.first_divergent_kernel
    assert (found.answer, found.name, found.fallback_index) == (
        R.Answer.KERNEL,
        "torch.ops.harness_fallback_test.fill_rows_.default",
        0,
    )
    assert found.isolated.startswith(
        "the wrapper's glue is wrong: it hands out to harness_fallback_test.fill_rows_.default as a view of "
    )
    assert (
        "with size (4, 16) stride (16, 1) storage offset 0, where eager's value of slice_tensor has size (4, 16) "
        "stride (16, 1) storage offset 32" in found.isolated
    )
    assert found.isolated.endswith("holds eager's values")
    assert _run(cases, "fallback_view_write", dynamic=dynamic).status == R.PASS


def test_under_dynamic_shapes_a_view_of_a_buffer_the_graph_made_is_checked_by_the_glue_check(cases):
    # The view's offset is symbolic there (2 * s1 elements): the answer names the glue, never "not probed".
    record = _run(cases, "fallback_view_of_mutated_buffer", inject="glue-offset-dropped", bisect=True, dynamic=True)
    assert record.status == R.FAIL, record.summary()
    found = record.first_divergent_kernel
    assert (found.answer, found.name) == (R.Answer.KERNEL, "torch.ops.harness_fallback_test.fill_rows_.default")
    assert "as a view of buf0 with size (4, 16) stride (16, 1) storage offset 0, where eager's value of " in (
        found.isolated
    )
    assert "not probed" not in record.summary()
    assert _run(cases, "fallback_view_of_mutated_buffer", dynamic=True).status == R.PASS


def test_a_view_the_wrapper_builds_at_the_wrong_offset_for_an_op_to_read_is_named_too(cases):
    # The dropped offset covers the views a call reads as well as those it writes.
    record = _run(cases, "fallback_view_read", inject="glue-offset-dropped", bisect=True)
    assert record.status == R.FAIL and record.emulation == "glue-offset-dropped", record.summary()
    assert record.injection_stats.hits == ["aten:0:torch.ops.harness_fallback_test.row_sums.default:x"]
    found = record.first_divergent_kernel
    assert (found.answer, found.name) == (R.Answer.KERNEL, "torch.ops.harness_fallback_test.row_sums.default")
    assert found.isolated.startswith("the wrapper's glue is wrong: it hands x to harness_fallback_test.row_sums")
    assert "as a view of arg0_1 with size (4, 16) stride (16, 1) storage offset 0, where eager's value of " in (
        found.isolated
    )
    assert found.isolated.endswith(
        "has size (4, 16) stride (16, 1) storage offset 32; 64/64 of its elements differ "
        "while arg0_1 holds eager's values"
    )
    assert _run(cases, "fallback_view_read").status == R.PASS


def test_extract_says_why_a_fallback_answer_is_not_extracted(cases, tmp_path):
    record = _run(cases, "fallback_custom_op_wrong_layout", bisect=True, extract_dir=str(tmp_path))
    assert record.extracted == "not-extracted"
    assert any("fallback call aten:0; fallback calls are not extracted yet" in w for w in record.warnings)


def test_a_wrong_linear_solve_is_named_by_its_op_glob(cases):
    # _linalg_solve_ex is an ATen fallback on CPU and CUDA alike (aten.sort is a Triton kernel on CUDA).
    record = _run(cases, "fallback_linalg_solve", inject="fault-scale@aten:*solve*", bisect=True)
    found = record.first_divergent_kernel
    assert (record.status, found.name, found.fallback_index) == (R.FAIL, "torch.ops.aten._linalg_solve_ex.default", 0)
    assert found.isolated.startswith(
        "ATen fallback `aten._linalg_solve_ex.default` (on the NPU: a CANN operator) "
        "is wrong: on eager values of its inputs"
    )


def test_returns_that_hold_the_generators_state_are_not_compared():
    from harness.probe.regions import _GENERATOR_STATE, _return_name

    op = torch.ops.aten._scaled_dot_product_efficient_attention.default
    launch = Launch(KernelInfo(f"torch.ops.{op}", KIND_FALLBACK, [], op=op), 0, [], {}, lambda: None, fallback=0)
    names = [_return_name(launch, (i,)) for i in range(4)]
    assert names == ["output", "log_sumexp", "philox_seed", "philox_offset"]
    assert [any(word in name for word in _GENERATOR_STATE) for name in names] == [False, False, True, True]


@pytest.mark.parametrize(
    "name, mode",
    [
        ("fallback_sort_cumsum", "inference"),
        ("fallback_sort_cumsum", "training"),
        ("fallback_linalg_solve", "inference"),
        ("fallback_linalg_solve", "training"),
        ("fallback_mutating_custom_op", "inference"),
        ("fallback_mutating_custom_op", "training"),
        ("fallback_view_write", "inference"),
    ],
)
def test_correct_programs_with_fallbacks_blame_nothing(cases, name, mode):
    record = _run(cases, name, mode, bisect="always")
    assert record.status == R.PASS, record.summary()
    found = record.first_divergent_kernel
    assert (found.answer, found.diverged, found.absorbed) == (R.Answer.NONE, False, [])
    assert any(e.fallback is not None and e.compared for e in found.kernels)


def test_a_fallback_selector_that_selects_nothing_is_injection_missed(cases):
    record = _run(cases, "fallback_sort_cumsum", inject="fault-scale@aten:7")
    assert (record.status, record.symptom) == (R.ERROR, R.Symptom.INJECTION_MISSED)
    assert (
        "@aten:7 selected none of the 2 fallback calls (there is no fallback call 7: fallback calls count from 0 "
        "to 1)" in record.error.message
    )


@pytest.mark.parametrize("text", ["reduction-partial@aten:0", "fault-stride-collapse@aten:0"])
def test_fallback_selectors_belong_to_the_corruptions_only(text):
    with pytest.raises(ValueError, match="selects fallback calls"):
        parse_injection(text)


def test_a_fallback_call_is_flattened_by_its_schema():
    op = torch.ops.aten.index_put_.default
    values, index = torch.zeros(4), torch.tensor([1, 2])
    leaves, labels, roles, rebuild = _flatten_call(op, (values, [index], torch.ones(2)), {"accumulate": True})
    assert labels == ["self", "indices[0]", "values", "accumulate"]
    assert roles == ["inout", "in", "in", "scalar"]
    args, kwargs = rebuild(tuple(leaves))
    assert args[1] == [index] and isinstance(args[1], list) and kwargs == {"accumulate": True}


def test_views_asserts_and_allocations_are_glue_not_launches():
    assert not is_fallback_launch(torch.ops.aten.view.dtype)
    assert not is_fallback_launch(torch.ops.aten.as_strided.default)
    assert not is_fallback_launch(torch.ops.aten._assert_async.msg)
    assert is_fallback_launch(torch.ops.aten.sort.stable)
    assert is_fallback_launch(torch.ops.aten.index_put_.default)


def test_a_fallback_launch_takes_what_it_returned_as_written_arguments():
    op = torch.ops.aten.sort.stable
    x = torch.tensor([3.0, 1.0, 2.0])
    leaves, labels, roles, rebuild = _flatten_call(op, (x,), {"stable": False, "dim": 0})
    launch = Launch(
        KernelInfo("torch.ops.aten.sort.stable", KIND_FALLBACK, [], op=op),
        0,
        leaves,
        {},
        lambda *given: op(*rebuild(given)[0], **rebuild(given)[1]),
        fallback=0,
        labels=labels,
        roles=roles,
    )
    values, indices = launch.run()
    assert [(launch.param_name(k), launch.role(k)) for k, _ in launch.written_args()] == [
        ("result[0]", "out"),
        ("result[1]", "out"),
    ]
    assert launch.result_path(values) == (0,) and launch.result_path(indices) == (1,)
    assert launch.key == "aten:0" and launch.selector == "aten:0"


@pytest.mark.parametrize(
    "case_name, op, said",
    [
        ("contract_undeclared_mutation", "scale_in_place_undeclared", "writes `x`, declared not mutable"),
        ("contract_output_aliases_input", "flat_view_undeclared", "returns a view of `x`, declared as a fresh tensor"),
    ],
)
def test_a_custom_op_that_breaks_its_schema_is_the_answer_not_a_kernel_or_a_pass(cases, case_name, op, said):
    # Inductor trusted the schema: before, the answer was a graph pass ("no single pass is to blame") or the stage
    # before Inductor, and on another program the kernel reading the buffer.
    record = _run(cases, case_name, bisect=True)
    assert record.status == R.FAIL, record.summary()
    found = record.first_divergent_kernel
    assert (found.answer, found.kind, found.name) == (
        R.Answer.KERNEL,
        KIND_FALLBACK,
        f"torch.ops.harness_fallback_test.{op}",
    )
    assert found.isolated.startswith(f"custom op harness_fallback_test::{op} breaks its own contract: it {said}")
    assert "torch.library.opcheck's test_schema" in found.isolated
    assert f"first divergent kernel: torch.ops.harness_fallback_test.{op} stage=inductor; custom op" in found.line()


def test_a_verdict_is_the_same_where_ci_is_set(cases, monkeypatch):
    # CI jobs set `CI`, which torch reads as its own CI's: functorch then makes an aliasing custom op raise at run
    # time (its default, decided when torch was imported), and the run was an error in CI and a failure elsewhere.
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(torch._functorch.config, "error_on_custom_op_aliasing", True)
    record = _run(cases, "contract_output_aliases_input", bisect=True)
    assert record.status == R.FAIL, record.summary()
    assert record.first_divergent_kernel.isolated.startswith(
        "custom op harness_fallback_test::flat_view_undeclared breaks its own contract"
    )
    assert os.environ["CI"] == "true" and torch._functorch.config.error_on_custom_op_aliasing is True


def test_a_custom_op_whose_fake_kernel_lies_is_named_where_the_compile_breaks(cases):
    record = _run(cases, "contract_fake_kernel_wrong_layout", bisect=True)
    assert record.status == R.ERROR and record.stage == R.Stage.COMPILE, record.summary()
    assert record.diagnosis.startswith(
        "custom op harness_fallback_test::transpose_fake_untransposed breaks its own contract: it has a fake kernel "
        "whose output differs from the real one's: Shapes torch.Size([16, 8]) and torch.Size([8, 16]) are not equal"
    ), record.diagnosis


def test_a_program_whose_custom_ops_keep_their_contracts_is_not_answered_by_them(cases):
    # fallback_custom_op_wrong_layout's op is wrong, but within its schema: the probe names it, as before.
    record = _run(cases, "fallback_custom_op_wrong_layout", bisect=True)
    found = record.first_divergent_kernel
    assert found.name == "torch.ops.harness_fallback_test.double_it.default" and "contract" not in found.isolated


def test_an_op_opcheck_cannot_run_is_no_breach_of_its_contract():
    # Longformer's torch.autograd.profiler.record_function once made `profiler::_record_function_exit` "break its
    # contract" (opcheck cannot copy its ScriptObject argument): a false blame of torch's own op in a correct model.
    from harness.run.contracts import contract_breaches, custom_op_calls

    def program():
        x = torch.ones(4)
        with torch.autograd.profiler.record_function("region"):
            y = x * 2
        return torch.ops.harness_fallback_test.no_fake_kernel(y)  # opcheck's fake test cannot run it either

    if not hasattr(torch.ops.harness_fallback_test, "no_fake_kernel"):
        torch.library.custom_op("harness_fallback_test::no_fake_kernel", mutates_args=())(_plus_one)
    calls = custom_op_calls(program)
    assert [str(op.name()) for op in calls] == ["harness_fallback_test::no_fake_kernel"]
    assert contract_breaches(calls) == []
    # opcheck itself does fail the op: what it says decides, not whether it failed.
    op = torch.ops.harness_fallback_test.no_fake_kernel
    outcome = torch.library.opcheck(op, (torch.ones(2),), raise_exception=False)
    assert outcome["test_schema"] == "SUCCESS" and outcome["test_faketensor"] != "SUCCESS"


def _plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1
