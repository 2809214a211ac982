"""Dynamic runs (harness/run/dynamic.py): one compile with symbolic sizes, judged at two sizes.

Known answers for the plan (which dims vary, the second size, resized layouts); runs of real programs that
pass at both sizes without recompiling; emulations that fail at both sizes and are localized; and a fault
that only the second size meets, which the record names.
"""

import pytest
import torch

from harness.inject import launch as emulation
from harness import records as R
from harness.run.dynamic import plans_for, resized, resized_tensor, second_size
from harness.inject.launch import Injection
from harness.inputs import TensorSpec, contiguous, gapped, permuted, strided
from harness.records import InjectionStats
from harness.registry import Case, Program, load_registry
from harness.run.case import RunConfig, run_case

DYNAMIC = RunConfig(dynamic=True)


@pytest.mark.parametrize("size, second", [(16, 17), (7, 9), (15, 17), (31, 33), (47, 49), (2, 3), (100, 101)])
def test_the_second_size_is_one_more_and_no_multiple_of_8_or_16(size, second):
    assert second_size(size) == second


def test_by_default_the_leading_dims_vary_then_every_dim_of_their_sizes():
    alone, every = plans_for([contiguous((16, 64)), contiguous((64, 16)), contiguous((64,)), 3.0], {}, None)
    # 16 and 64 lead the rank-2 inputs. First they vary alone; then every dim of those sizes with them (a
    # matmul's inner size that equals a batch).
    assert dict(alone.sizes) == dict(every.sizes) == {16: 17, 64: 65}
    assert dict(alone.marks) == {0: (0,), 1: (0,)}
    assert dict(every.marks) == {0: (0, 1), 1: (0, 1), 2: (0,)}


def test_declared_dims_replace_the_default():
    alone, every = plans_for([contiguous((16, 64)), contiguous((64,))], {}, {1: (0,)})
    assert dict(alone.sizes) == {64: 65} and dict(alone.marks) == {1: (0,)}
    assert dict(every.marks) == {0: (1,), 1: (0,)}


def test_no_varying_dim_says_why():
    assert "no input dim can vary" in plans_for([contiguous((64,)), contiguous((1, 8))], {}, None)


def test_a_conv_varies_its_batch_alone_and_a_matmul_its_shared_size_too():
    conv = Case(
        name="dynamic_conv", build=lambda d: Program(torch.nn.Conv2d(8, 4, 3), [contiguous((8, 8, 12, 12))])
    )  # batch 8 equals the channels
    record = run_case(conv, torch.float32, "inference", DYNAMIC)
    assert (record.status, record.dynamic_sizes) == (R.PASS, [[[8, 8, 12, 12]], [[9, 8, 12, 12]]]), record.summary()
    matmul = Case(
        name="dynamic_matmul", build=lambda d: Program(torch.matmul, [contiguous((16, 32)), contiguous((32, 8))])
    )  # 32 leads the second and ends the first
    record = run_case(matmul, torch.float32, "inference", DYNAMIC)
    assert (record.status, record.dynamic_sizes) == (R.PASS, [[[16, 32], [32, 8]], [[17, 33], [33, 8]]]), (
        record.summary()
    )


def test_a_tensor_given_as_it_is_repeats_its_values_in_its_own_layout():
    t = torch.arange(6.0).reshape(3, 2).t()  # (2, 3), stride (1, 2)
    grown = resized_tensor(t.requires_grad_(), {1: 5})
    assert grown.tolist() == [[0.0, 2.0, 4.0, 0.0, 2.0], [1.0, 3.0, 5.0, 1.0, 3.0]]
    assert grown.stride() == (1, 2) and grown.requires_grad and grown.is_leaf


def test_resized_layouts_keep_their_order_gaps_and_broadcasts():
    assert resized(contiguous((16, 64)), {0: 17}).resolved_stride == (64, 1)
    # A transpose of a (64, 16) buffer: dim 0 is innermost in memory.
    moved = resized(permuted((64, 16), (1, 0)), {0: 17})
    assert (moved.size, moved.stride) == ((17, 64), (1, 17))
    # Every other column of a (48, 128) buffer: the step of 2 stays.
    step = resized(gapped((48, 64), step=2), {0: 49})
    assert (step.size, step.stride) == ((49, 64), (128, 2))
    # A stride-0 dim stays broadcast; an overlapping view keeps its strides, its storage grown to fit.
    assert resized(TensorSpec((4, 8), stride=(0, 1)), {0: 5}).stride == (0, 1)
    overlap = resized(strided((6, 4), (2, 1), storage_numel=14), {0: 7})
    assert overlap.stride == (2, 1) and overlap.storage_numel == 16


def test_a_correct_model_passes_at_both_sizes_without_recompiling():
    record = run_case(load_registry().cases["relu_mlp"], torch.float32, "training", DYNAMIC)
    assert (record.status, record.dynamic, record.recompiled, record.failed_sizes) == (R.PASS, True, False, [])
    assert record.dynamic_sizes == [[[16, 64]], [[17, 64]]]
    assert record.run_id == "relu_mlp[float32-training-dynamic]"
    assert {o.name for o in record.outputs} >= {"out0", "out0@size2", "grad_in0@size2"}


@pytest.mark.parametrize(
    "name, dtype",
    [
        ("seed_index_as_strided_view", torch.int64),
        ("layout_input_overlapping", torch.int64),
        ("layout_input_gapped_slice", torch.float64),
    ],
)
def test_the_launch_boundary_downcast_fails_both_sizes_and_is_localized(name, dtype):
    record = run_case(
        load_registry().cases[name],
        dtype,
        "inference",
        RunConfig(dynamic=True, inject="boundary-downcast", bisect=True),
    )
    assert (record.status, record.failed_sizes, record.recompiled) == (R.FAIL, [1, 2], False), record.summary()
    assert record.first_divergent_kernel.answer == R.Answer.KERNEL, record.first_divergent_kernel.line()


class WrongAtAnotherSize:
    """Adds 1 to what a generated kernel writes when its arguments' shapes are not those of its first launch:
    a dynamic kernel right at the size it was compiled for and wrong at any other."""

    first_shapes: dict[int, list] = {}  # by kernel, across the handlers of one run (one per run of it)

    def __init__(self, selector):
        self.stats = InjectionStats(hits=[])

    def __call__(self, launch):
        result = launch.run()
        if launch.kernel.kind == "extern":
            return result
        shapes = [tuple(t.shape) for _, t in launch.tensor_args()]
        seen = self.first_shapes.setdefault(id(launch.kernel), shapes)
        if shapes != seen:
            self.stats.hits.append(f"{launch.index}:{launch.kernel.name}")
            for _, written in launch.written():
                written.add_(1)
        return result

    def missed(self):
        return None  # at the first size it hits nothing, by design


@pytest.fixture
def wrong_at_another_size(monkeypatch):
    monkeypatch.setitem(
        emulation.INJECTIONS,
        "test-wrong-at-another-size",
        Injection("test-wrong-at-another-size", "a dynamic kernel wrong at any size but its first", WrongAtAnotherSize),
    )
    return "test-wrong-at-another-size"


SCALE = Case(name="dynamic_scale_rows", build=lambda d: Program(lambda x: (x * 3 + 1).sum(-1), [contiguous((16, 64))]))


def test_a_kernel_wrong_only_at_the_second_size_fails_and_names_that_size(wrong_at_another_size):
    record = run_case(
        SCALE, torch.float32, "inference", RunConfig(dynamic=True, inject=wrong_at_another_size, bisect=True)
    )
    assert (record.status, record.failed_sizes) == (R.FAIL, [2]), record.summary()
    failing = [o.name for o in record.outputs if not o.passed]
    assert failing == ["out0@size2"]
    found = record.first_divergent_kernel
    assert found.answer == R.Answer.KERNEL and found.isolated.startswith("kernel is wrong"), found.line()


def test_a_second_size_lowered_afresh_is_compiled_at_the_first_size(monkeypatch, wrong_at_another_size):
    """Graphs from a cache entry without lowering facts are lowered again, caches off, for the probe. The
    program probed at the second size is the one compiled at the first: lowered at the second, the kernel
    would be right there."""
    from harness.inductor_compat import graphs

    monkeypatch.setattr(graphs, "_save_sidecar", lambda info: None)
    monkeypatch.setattr(graphs, "_load_sidecar", lambda path: None)
    assert run_case(SCALE, torch.float32, "inference", RunConfig(dynamic=True)).status == R.PASS  # cached, no facts
    monkeypatch.setattr(graphs, "_GRAPHS", {})
    record = run_case(
        SCALE, torch.float32, "inference", RunConfig(dynamic=True, inject=wrong_at_another_size, bisect=True)
    )
    assert (record.status, record.failed_sizes) == (R.FAIL, [2]), record.summary()
    found = record.first_divergent_kernel
    assert any("lowered again with caches off" in p for p in found.problems), found.problems
    assert found.answer == R.Answer.KERNEL and found.isolated.startswith("kernel is wrong"), found.line()


def branches_on_size(x):
    return x * 2 if x.shape[0] % 2 == 0 else x * 3  # a guard on the size: each parity its own graph


BRANCH = Case(name="dynamic_branch_on_size", build=lambda d: Program(branches_on_size, [contiguous((16, 8))]))


def test_a_recompilation_whose_values_pass_is_a_pass_naming_the_guard():
    record = run_case(BRANCH, torch.float32, "inference", DYNAMIC)
    assert (record.status, record.recompiled, record.failed_sizes) == (R.PASS, True, []), record.summary()
    (reason,) = record.recompile_reasons
    assert "(x.size()[0] % 2) == 0" in reason, reason
    assert any("compiled again (guard failed: " in w and "--dynamic strict" in w for w in record.warnings)


def test_the_guard_is_named_when_an_earlier_run_in_the_process_recompiled_too():
    """Dynamo's compile ids start again after every reset: an earlier run's "0/1" must not hide this one's."""
    for _ in range(2):
        record = run_case(BRANCH, torch.float32, "inference", DYNAMIC)
        assert record.recompiled and len(record.recompile_reasons) == 1, record.summary()


def test_dynamic_strict_fails_a_recompilation_and_says_so_in_the_command():
    strict = RunConfig(dynamic=True, dynamic_strict=True)
    record = run_case(BRANCH, torch.float32, "inference", strict)
    assert (record.status, record.symptom, record.recompiled) == (R.FAIL, R.Symptom.RECOMPILED, True), record.summary()
    assert "compiled again (guard failed: " in record.diagnosis
    assert strict.command_for(BRANCH.name, "float32", "inference").endswith("--dynamic strict")
    assert RunConfig(dynamic_strict=True).dynamic  # strict alone is a dynamic run


def test_a_case_whose_second_size_eager_rejects_is_skipped_with_the_reason():
    mismatched = Case(
        name="dynamic_fixed_width", build=lambda d: Program(lambda x: x.reshape(16, 8, 1) * 2, [contiguous((16, 8))])
    )  # a size baked into the program
    record = run_case(mismatched, torch.float32, "inference", DYNAMIC)
    assert record.status == R.SKIP and "eager rejects the second size" in record.reason, record.summary()


def test_the_report_and_the_console_show_the_sizes_and_which_failed():
    from harness.records import CaseResult
    from harness.report import render_html

    record = CaseResult(
        case="scaled",
        device="cpu",
        backend="inductor",
        dtype="float32",
        mode="inference",
        status=R.FAIL,
        dynamic=True,
        dynamic_sizes=[[[16, 64]], [[17, 64]]],
        failed_sizes=[2],
        recompiled=False,
        duration_s=1.0,
    )
    assert record.run_id == "scaled[float32-inference-dynamic]"
    assert "dynamic sizes: 1 (16, 64) -> 2 (17, 64) FAILED" in record.summary()
    html = render_html([record], {})
    assert '(16, 64) → <b class="failed">(17, 64)</b>' in html
    assert "scaled[float32-inference-dynamic]" in html


def test_the_opinfo_sweep_has_a_dynamic_axis_in_its_ci_sample():
    pytest.importorskip("expecttest")
    registry = load_registry()
    dynamic = registry.select(tags=("opinfo",), keyword="dynamic")
    assert dynamic and all(c.always_dynamic and c.name.endswith("-dynamic") and "ci" in c.tags for c in dynamic)
    static = registry.cases[dynamic[0].name.removesuffix("-dynamic")]
    assert not static.always_dynamic
    record = run_case(
        registry.cases["opinfo-neg-bfloat16-s0-overlapping-dynamic"], torch.bfloat16, "inference", RunConfig()
    )  # no --dynamic: the case asks for it
    assert (record.status, record.dynamic, record.recompiled) == (R.PASS, True, False), record.summary()
    (first,), (second,) = record.dynamic_sizes  # the leading dim alone: eager accepts that
    assert second == [first[0] + 1, *first[1:]], record.dynamic_sizes


CORRECT = sorted(load_registry().select(tags=["correct"]), key=lambda c: c.name)


@pytest.mark.parametrize("case", CORRECT, ids=lambda c: c.name)
def test_a_correct_program_passes_at_two_sizes_without_recompiling(case):
    """The correct corpus, one run a case (training when it has one, its narrowest float dtype). A program
    that bakes a size in (a reshape to fixed sizes, an as_strided view) is skipped, saying why."""
    mode = "training" if "training" in case.modes else case.modes[0]
    floats = [d for d in case.dtypes if d.is_floating_point]
    dtype = min(floats, key=lambda d: torch.finfo(d).bits) if floats else case.dtypes[0]
    record = run_case(case, dtype, mode, DYNAMIC)
    if record.status == R.SKIP:
        assert record.reason.startswith("dynamic: "), record.summary()
        return
    assert (record.status, record.recompiled, record.failed_sizes) == (R.PASS, False, []), record.summary()
    first, second = record.dynamic_sizes
    assert first != second


def test_an_eager_result_not_repeatable_at_the_second_size_gives_no_verdict():
    """At the second size eager runs twice, as at the first: a result that changes between them is no reference,
    so the run is `nondeterministic`, not a divergence of the compiled program."""
    calls = []

    def program(x):
        if x.shape[0] == 16:
            return x * 2
        calls.append(None)  # from the second size on, every run adds another number
        return x * 2 + len(calls)

    case = Case(name="dynamic_eager_differs_at_size_2", build=lambda d: Program(program, [contiguous((16, 8))]))
    record = run_case(case, torch.float32, "inference", RunConfig(dynamic=True, backend="eager"))
    assert (record.status, record.symptom) == (R.NONDETERMINISTIC, R.Symptom.NONDETERMINISM), record.summary()
    assert "two eager runs differ (out0)" in record.diagnosis


def test_a_parameter_given_as_an_input_keeps_its_sizes_unless_declared():
    weight = torch.nn.Parameter(torch.randn(16, 8))
    (plan,) = plans_for([TensorSpec((16, 8)), weight], {}, None)[:1]
    assert dict(plan.marks) == {0: (0,)}  # the input varies, the weight does not
    assert all(1 not in p.marks for p in plans_for([TensorSpec((16, 8)), weight], {}, None))
    (declared,) = plans_for([TensorSpec((16, 8)), weight], {}, {1: (0,)})[:1]
    assert dict(declared.marks) == {1: (0,)}


def test_a_dynamic_failure_is_extracted_as_a_static_case_when_that_reproduces(tmp_path):
    record = run_case(
        load_registry().cases["layout_input_gapped_slice"],
        torch.float64,
        "inference",
        RunConfig(dynamic=True, inject="boundary-downcast", bisect=True, extract_dir=str(tmp_path)),
    )
    assert record.extracted == "reproduces", (record.extracted, record.extraction and record.extraction.notes)
    said = next(n for n in record.extraction.notes if n.startswith("extracted from a dynamic run"))
    assert "at its first size" in said and "static at those shapes, and reproduces run without --dynamic" in said
    assert "always_dynamic" not in open(record.extraction.case_file).read()


def test_a_failure_only_a_dynamic_kernel_has_is_extracted_as_a_case_that_always_runs_dynamic(
    wrong_at_another_size, tmp_path
):
    record = run_case(
        SCALE,
        torch.float32,
        "inference",
        RunConfig(dynamic=True, inject=wrong_at_another_size, bisect=True, extract_dir=str(tmp_path)),
    )
    assert (record.failed_sizes, record.extracted) == ([2], "reproduces"), record.extraction.notes
    said = next(n for n in record.extraction.notes if n.startswith("extracted from a dynamic run"))
    assert "at its second size ((17, 64))" in said and "always runs dynamic" in said, said
    assert "always_dynamic=True" in open(record.extraction.case_file).read()


def test_dynamic_strict_is_a_word_after_the_flag_and_anything_else_a_usage_error():
    import argparse

    from harness.frontends.options import RUN_OPTIONS, add_to_argparse, run_config_from

    parser = argparse.ArgumentParser()
    add_to_argparse(parser, RUN_OPTIONS)
    values = lambda *argv: vars(parser.parse_args(list(argv)))  # noqa: E731
    assert (run_config_from(values("--dynamic")).dynamic, run_config_from(values("--dynamic")).dynamic_strict) == (
        True,
        False,
    )
    strict = run_config_from(values("--dynamic", "strict"))
    assert (strict.dynamic, strict.dynamic_strict, strict.identity()["dynamic_strict"]) == (True, True, True)
    assert "dynamic_strict" not in run_config_from(values("--dynamic")).identity()
    with pytest.raises(SystemExit):
        values("--dynamic", "relu_mlp")  # a case name after --dynamic is no mode: name cases before it


@pytest.mark.parametrize(
    "dims, said",
    [
        ({0: (-1,)}, None),  # the last dim, as torch counts: it varies
        ({0: (2,)}, "has no dim 2"),
        ({0: "0"}, "needs a tuple of dims"),
    ],
)
def test_dynamic_dims_count_from_the_end_and_a_dim_the_input_lacks_is_an_error(dims, said):
    case = Case(
        name="dynamic_declared", build=lambda d: Program(lambda x: x * 2, [contiguous((16, 8))]), dynamic_dims=dims
    )
    record = run_case(case, torch.float32, "inference", DYNAMIC)
    if said is None:
        assert (record.status, record.dynamic_sizes) == (R.PASS, [[[16, 8]], [[16, 9]]]), record.summary()
        return
    assert (record.status, record.stage) == (R.ERROR, R.Stage.BUILD), record.summary()
    assert said in record.error.message and "dynamic_dims" in record.error.message, record.error.message


def test_a_second_size_equal_to_the_first_is_an_error_naming_the_declaration():
    from harness.run.dynamic import BadDynamicDims, check_second_size

    same = ([TensorSpec((16, 8))], {})
    with pytest.raises(BadDynamicDims, match=r"dynamic_dims \{0: \(1,\)\} made the second size equal"):
        check_second_size(same, same, {0: (1,)})
    check_second_size(same, ([TensorSpec((17, 8))], {}), None)  # a size that changed: no error
