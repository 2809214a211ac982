"""Answers for failures that are not one wrong kernel: the stage, the graph pass, the layout (CPU Inductor).

Dynamo and functionalization bugs are emulated where torch 2.13 has none at hand (labelled so); the pass and
layout answers are checked on real upstream bugs of the registry, and on a wrong pattern rewrite registered
into Inductor's own pattern matcher for one test.
"""

import pytest
import torch

from harness import records as R
from harness.judge.compare import differs_only_where_undefined
from harness.inductor_compat import compile_caches_off
from harness.inputs import broadcast, contiguous
from harness.probe.search import STAGE_BACKENDS, first_diverging_stage
from harness.probe.pass_bisection import find_pass
from harness.registry import Case, Program, load_registry
from harness.run.case import RunConfig, run_case

CASES = load_registry().cases


def localized(case, dtype=torch.float32, mode="inference", **config):
    record = run_case(case, dtype, mode, RunConfig(bisect=True, **config))
    return record, record.first_divergent_kernel


# Emulation of a Dynamo graph-capture bug: Dynamo traces `wrong_scale` wherever the program calls `scale`
# (a polyfill registered through Dynamo's public `substitute_in_graph`); eager calls `scale` itself.
def scale(x):
    return x * 3


def wrong_scale(x):
    return x * 2


torch._dynamo.substitute_in_graph(scale, skip_signature_check=True)(wrong_scale)


def scaled_sine(x):
    return torch.sin(scale(x)) + 1


DYNAMO_BUG = Case(name="dynamo_capture_emulation", build=lambda d: Program(scaled_sine, [contiguous((8, 8))]))


def test_a_divergence_dynamo_alone_shows_is_answered_dynamo_in_two_compiles():
    record, found = localized(DYNAMO_BUG)
    assert record.status == R.FAIL
    assert (found.answer, found.stage, found.name) == (R.Answer.STAGE, "dynamo", None)
    assert "backend='eager'" in found.reason and "Dynamo's bytecode, guards or graph capture" in found.reason
    # aot_eager diverges, then eager decides: two compiles, no graph pass searched.
    assert found.compiles == 2 and found.graph_pass is None
    assert "stage: diverges already under backend='eager'" in record.summary()
    assert found.visible_at is None  # the kernels compute what the graph says: no launch differs from it


def test_a_functionalization_divergence_is_answered_aot_eager():
    # AOT autograd's regenerated views of an overlapping input scatter their gradient into shared storage: a
    # real upstream bug; Dynamo alone (backend "eager") runs the program right.
    record, found = localized(CASES["upstream_new_split_overlapping_input_grad"], mode="training")
    assert record.status == R.FAIL
    assert (found.answer, found.stage, found.name) == (R.Answer.STAGE, "aot_eager", None)
    assert "backend='aot_eager'" in found.reason and found.compiles == 2


@pytest.mark.parametrize(
    "diverging, stage, asked",
    [
        ((), "inductor", ["aot_eager", "aot_eager_decomp_partition"]),
        (("aot_eager_decomp_partition",), "aot_eager_decomp_partition", ["aot_eager", "aot_eager_decomp_partition"]),
        (("aot_eager", "aot_eager_decomp_partition"), "aot_eager", ["aot_eager", "eager"]),
        (("eager", "aot_eager", "aot_eager_decomp_partition"), "dynamo", ["aot_eager", "eager"]),
    ],
)
def test_the_stage_search_asks_two_backends_whatever_the_stage(diverging, stage, asked):
    seen = []

    def diverges_under(backend):
        seen.append(backend)
        return backend in diverging

    assert first_diverging_stage(diverges_under) == stage
    assert seen == asked and {b for b, _ in STAGE_BACKENDS} >= set(seen)


@pytest.mark.parametrize(
    "case, graph_pass",
    [
        ("upstream_198094_slice_scatter_reinplaced_into_mutated_input", "post_grad_passes: reinplace_inplaceable_ops"),
        ("upstream_198131_copy_of_input_mutated_later", "joint_graph_passes: remove_noop_ops"),
    ],
)
def test_a_graph_pass_bug_names_the_pass_and_the_run_passes_with_it_off(case, graph_pass):
    case = CASES[case]
    dtype = case.dtypes[0]
    record, found = localized(case, dtype)
    assert record.status == R.FAIL  # a real upstream bug (declared: the pool makes it xfail)
    assert (found.answer, found.stage, found.graph_pass, found.name) == (
        R.Answer.STAGE,
        "inductor_graph_passes",
        graph_pass,
        None,
    )
    assert graph_pass in found.graph_passes_changed
    assert "the run passes with that pass alone turned off" in found.reason
    # Two stage compiles, one observing the passes, at least one with passes off.
    assert 4 <= found.compiles <= 2 + 1 + 2 * len(found.graph_passes_changed)
    assert found.names(f"pass:{graph_pass.split(': ')[1]}")
    # Inductor's own switch for a named pass agrees: with it off, the program passes.
    name = graph_pass.split(": ")[1]
    again = run_case(case, dtype, "inference", RunConfig(compile_options={"disabled_passes": name}))
    assert again.status == R.PASS, again.summary()


@pytest.fixture
def negation_dropped():
    """A wrong pattern rewrite in Inductor's post-grad pattern matcher (sin(-x) computed as sin(x)), registered
    for one test and removed after it."""
    from torch._inductor.fx_passes.post_grad import pass_patterns
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, register_graph_pattern

    aten = torch.ops.aten
    before = {key: list(entries) for key, entries in pass_patterns[1].patterns.items()}

    @register_graph_pattern(CallFunction(aten.neg.default, KeywordArg("x")), pass_dict=pass_patterns[1])
    def drop_negation(match, x):
        node = match.output_node()
        node.replace_all_uses_with(x)
        match.graph.erase_node(node)

    # Caches off: the registered patterns are not part of a cache key, so no entry made with it may outlive it.
    with compile_caches_off():
        yield "post_grad_passes: pattern negation_dropped.<locals>.drop_negation (test_stages)"
    pass_patterns[1].patterns.clear()
    pass_patterns[1].patterns.update(before)


def sine_of_negation(x):
    return torch.sin(-x) * 2


NEGATED = Case(name="negated", build=lambda d: Program(sine_of_negation, [contiguous((16,))]))


def test_a_wrong_pattern_rewrite_is_named_by_its_handler(negation_dropped):
    record, found = localized(NEGATED)
    assert record.status == R.FAIL
    assert (found.answer, found.stage, found.graph_pass) == (R.Answer.STAGE, "inductor_graph_passes", negation_dropped)
    assert "the run passes with that pass alone turned off" in found.reason
    assert "inductor_graph_passes" in record.summary() and negation_dropped in record.summary()


def test_without_the_wrong_rewrite_the_same_program_passes():
    with compile_caches_off():
        assert run_case(NEGATED, torch.float32, "inference", RunConfig()).status == R.PASS


def test_the_pass_search_halves_and_says_when_no_single_pass_is_to_blame():
    from harness.inductor_compat.graph_passes import NAMED, GraphPass

    changed = [GraphPass(NAMED, f"p{i}", "post_grad_passes", f"pass:p{i}") for i in range(12)]
    tried = []

    def passes_without(keys, culprit="pass:p5"):
        tried.append(keys)
        return culprit in keys

    finding = find_pass(lambda: changed, passes_without)
    assert finding.named.name == "p5" and tried[-1] == frozenset({"pass:p5"})
    assert len(tried) <= 8  # about 2 log2(12)
    tried.clear()
    # Two passes together are to blame: no half alone makes the run pass.
    finding = find_pass(lambda: changed, lambda keys: tried.append(keys) or {"pass:p1", "pass:p6"} <= keys)
    assert finding.named is None and "no single Inductor graph pass is to blame" in finding.text
    assert find_pass(lambda: [], passes_without).text == "no Inductor graph pass changed the program's graphs"


def test_with_few_passes_each_is_turned_off_alone_and_the_one_touching_the_diverging_nodes_is_named():
    from harness.inductor_compat.graph_passes import NAMED, PATTERN, GraphPass

    cleanup = GraphPass(NAMED, "remove_noop_ops", "joint_graph_passes", "pass:cleanup", touched=frozenset({"sin"}))
    rewrite = GraphPass(PATTERN, "wrong", "post_grad_passes", "pattern:1", touched=frozenset({"sin_1", "mul"}))
    bystander = GraphPass(NAMED, "other", "post_grad_passes", "pass:other", touched=frozenset({"add"}))
    tried = []

    def passes_without(keys):  # the rewrite matches only after the cleanup: either one off makes the run pass
        tried.append(keys)
        return bool(keys & {"pass:cleanup", "pattern:1"})

    finding = find_pass(lambda: [cleanup, rewrite, bystander], passes_without, diverging=frozenset({"mul"}))
    assert tried == [frozenset({"pass:cleanup"}), frozenset({"pattern:1"}), frozenset({"pass:other"})]
    assert finding.named is rewrite and finding.enabling == [cleanup]
    assert "its change touches the diverging nodes (mul)" in finding.text
    assert "joint_graph_passes: remove_noop_ops enables it" in finding.text
    # The cleanup fired later and is the one the diverging nodes name: it is the culprit, whatever the order.
    finding = find_pass(lambda: [rewrite, cleanup, bystander], passes_without, diverging=frozenset({"sin"}))
    assert finding.named is cleanup and finding.enabling == [rewrite]
    # Nothing alone makes it pass: every pass was tried alone, and the answer says so.
    finding = find_pass(lambda: [cleanup, rewrite], lambda keys: keys == {"pass:cleanup", "pattern:1"})
    assert finding.named is None and "turning off each alone left the run failing (2 compiles)" in finding.text


def test_with_many_passes_halving_finds_the_enabling_cleanup_and_the_rewrite_touching_the_nodes_is_named():
    # Twelve passes changed the graphs (an attention model in training changes that many), so they are halved, and
    # halving keeps the first half whose absence makes the run pass: the one holding the cleanup that only lets
    # the wrong rewrite match. That cleanup was the answer; the rewrite, whose change touches the diverging
    # nodes, is turned off alone too.
    from harness.inductor_compat.graph_passes import NAMED, PATTERN, GraphPass

    cleanup = GraphPass(NAMED, "remove_noop_ops", "joint_graph_passes", "pass:cleanup", touched=frozenset({"view"}))
    rewrite = GraphPass(PATTERN, "_sfdp_pattern_5", "joint_graph_passes", "pattern:5", touched=frozenset({"sdpa"}))
    others = [
        GraphPass(NAMED, f"p{i}", "post_grad_passes", f"pass:p{i}", touched=frozenset({f"n{i}"})) for i in range(10)
    ]
    changed = [cleanup, *others[:6], rewrite, *others[6:]]
    tried = []

    def passes_without(keys, culprits=("pass:cleanup", "pattern:5")):
        tried.append(keys)
        return bool(keys & set(culprits))

    finding = find_pass(lambda: changed, passes_without, diverging=frozenset({"sdpa", "n3"}))
    assert finding.named is rewrite and finding.enabling == [cleanup], finding.text
    assert tried[-1] == frozenset({"pattern:5"})
    assert "its change touches the diverging nodes (sdpa); joint_graph_passes: remove_noop_ops enables it" in (
        finding.text
    )
    # A rewrite that does not clear the failure alone is not named: the cleanup stays, and the answer names the
    # passes it tried.
    tried.clear()
    finding = find_pass(
        lambda: changed, lambda keys: passes_without(keys, ("pass:cleanup",)), diverging=frozenset({"sdpa", "n3"})
    )
    assert finding.named is cleanup and finding.enabling == []
    assert "turning off alone each pass whose change does (joint_graph_passes: pattern _sfdp_pattern_5, " in (
        finding.text
    )
    assert "post_grad_passes: p3) left the run failing" in finding.text
    # The found pass touching the diverging nodes itself: nothing more is tried.
    tried.clear()
    finding = find_pass(lambda: changed, lambda keys: passes_without(keys, ("pass:p3",)), diverging=frozenset({"n3"}))
    assert finding.named.name == "p3" and tried[-1] == frozenset({"pass:p3"})  # halving's own last compile


@pytest.fixture
def negation_of_sine_dropped():
    """A wrong pattern rewrite, sin(-x) computed as sin(x), that matches only once Inductor's own cleanup
    `remove_noop_ops` removed the copy between the two (joint graph passes): either one turned off makes the
    run pass. Registered for one test and removed after it."""
    from torch._inductor.fx_passes.post_grad import pass_patterns
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, register_graph_pattern

    aten = torch.ops.aten
    before = {key: list(entries) for key, entries in pass_patterns[1].patterns.items()}

    @register_graph_pattern(
        CallFunction(aten.sin.default, CallFunction(aten.neg.default, KeywordArg("x"))), pass_dict=pass_patterns[1]
    )
    def sine_of_negation_is_sine(match, x):
        node = match.output_node()
        with match.graph.inserting_before(node):
            wrong = match.graph.call_function(aten.sin.default, (x,))
        wrong.meta.update(node.meta)
        node.replace_all_uses_with(wrong)
        match.erase_nodes()

    with compile_caches_off():
        yield "post_grad_passes: pattern negation_of_sine_dropped.<locals>.sine_of_negation_is_sine (test_stages)"
    pass_patterns[1].patterns.clear()
    pass_patterns[1].patterns.update(before)


def sine_of_a_negated_copy(x):
    return torch.sin(torch.neg(x).clone()) * 2


NEGATED_COPY = Case(name="negated_copy", build=lambda d: Program(sine_of_a_negated_copy, [contiguous((16,))]))


def test_a_wrong_rewrite_a_cleanup_enabled_is_named_and_the_cleanup_said_to_enable_it(negation_of_sine_dropped):
    record, found = localized(NEGATED_COPY)
    assert record.status == R.FAIL
    assert (found.answer, found.stage, found.graph_pass) == (
        R.Answer.STAGE,
        "inductor_graph_passes",
        negation_of_sine_dropped,
    )
    assert "joint_graph_passes: remove_noop_ops" in found.graph_passes_changed
    assert found.graph_passes_enabling == ["joint_graph_passes: remove_noop_ops"]
    assert "joint_graph_passes: remove_noop_ops enables it" in found.reason
    assert found.names("pass:" + negation_of_sine_dropped) and not found.names("pass:remove_noop_ops")


@pytest.fixture
def wrong_rewrite_among_several():
    """A pass with several patterns that fire on one program: a right rewrite (cos(-x) is cos(x)) and a wrong one
    (sin(-x) as sin(x)) registered as two entries, as Inductor registers a pattern once per dtype or variant. With
    one entry refused, the other makes the same rewrite: only the rewrite turned off as a whole shows it."""
    from torch._inductor.fx_passes.post_grad import pass_patterns
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, register_graph_pattern

    aten = torch.ops.aten
    before = {key: list(entries) for key, entries in pass_patterns[1].patterns.items()}

    def replace_with_op_of_x(op):
        def rewrite(match, x):
            node = match.output_node()
            with match.graph.inserting_before(node):
                replacement = match.graph.call_function(op, (x,))
            replacement.meta.update(node.meta)
            node.replace_all_uses_with(replacement)
            match.erase_nodes()

        return rewrite

    even_cosine = replace_with_op_of_x(aten.cos.default)
    even_cosine.__qualname__ = "cosine_is_even"
    register_graph_pattern(
        CallFunction(aten.cos.default, CallFunction(aten.neg.default, KeywordArg("x"))), pass_dict=pass_patterns[1]
    )(even_cosine)
    odd_sine_as_even = replace_with_op_of_x(aten.sin.default)
    odd_sine_as_even.__qualname__ = "sine_taken_as_even"
    for _ in range(2):  # two entries of one rewrite
        register_graph_pattern(
            CallFunction(aten.sin.default, CallFunction(aten.neg.default, KeywordArg("x"))), pass_dict=pass_patterns[1]
        )(odd_sine_as_even)
    with compile_caches_off():
        yield "post_grad_passes: pattern sine_taken_as_even (test_stages)"
    pass_patterns[1].patterns.clear()
    pass_patterns[1].patterns.update(before)


def sine_and_cosine_of_negation(x):
    return torch.sin(-x) + torch.cos(-x) * 3


BOTH_OF_NEGATION = Case(
    name="both_of_negation", build=lambda d: Program(sine_and_cosine_of_negation, [contiguous((16,))])
)


def test_a_wrong_pattern_among_several_of_one_pass_is_named_with_its_pass(wrong_rewrite_among_several):
    record, found = localized(BOTH_OF_NEGATION)
    assert record.status == R.FAIL
    assert (found.answer, found.stage, found.graph_pass) == (
        R.Answer.STAGE,
        "inductor_graph_passes",
        wrong_rewrite_among_several,
    ), found.line()
    assert "post_grad_passes: pattern cosine_is_even (test_stages)" in found.graph_passes_changed
    assert "the run passes with that pass alone turned off" in found.reason


def test_a_stride_0_result_names_the_node_and_kernel_whose_layout_first_differs():
    # as_strided_scatter of an expanded input: the compiled clone keeps the stride-0 layout (a real upstream bug).
    record, found = localized(CASES["upstream_new_as_strided_scatter_broadcast_input"])
    assert record.status == R.FAIL
    assert (found.answer, found.stage, found.name) == (R.Answer.KERNEL, "inductor", "cpp_fused_0")
    assert found.nodes == ["clone"] and found.graph_pass is None
    assert "strides (0, 1)" in found.isolated and "(3, 1)" in found.isolated
    assert "laid out with elements sharing memory" in found.reason


def clone_of_expanded(x):
    return x.expand(4, 4).clone() + 1


def test_a_correct_program_with_broadcast_values_blames_no_layout():
    case = Case(name="broadcast_clone", build=lambda d: Program(clone_of_expanded, [broadcast((1, 4), (1, 4))]))
    record = run_case(case, torch.float32, "inference", RunConfig(bisect="always"))
    assert record.status == R.PASS and record.first_divergent_kernel.answer == R.Answer.NONE


def promoted_differently(h, f):
    # Emulates an Inductor type-promotion bug in an op mixing float16 and float32: compiled, it computes and
    # returns float32 (finite); eager computes in float16, where the product overflows to inf.
    if torch.compiler.is_compiling():
        return h.float() * f
    return h * f.half()


MIXED = Case(
    name="mixed_half_float",
    dtypes=(torch.float16,),
    build=lambda d: Program(
        promoted_differently,
        [
            contiguous((64,), dtype=torch.float16, fill="arange", low=250),
            contiguous((64,), dtype=torch.float32, fill="arange", low=250),
        ],
    ),
)


def test_a_result_of_another_dtype_with_nonfinite_differences_is_a_failure_not_a_harness_error():
    record = run_case(MIXED, torch.float16, "inference", RunConfig())
    assert record.status == R.FAIL, record.summary()
    assert record.outputs[0].dtype == "float16" and "dtype float32 != float16" in record.outputs[0].layout_notes


def test_undefined_elements_of_results_of_two_dtypes_are_a_difference():
    inf = float("inf")
    actual = torch.tensor([1.0, 70000.0], dtype=torch.float32)
    expected = torch.tensor([1.0, inf], dtype=torch.float16)
    reference = torch.tensor([1.0, inf], dtype=torch.float64)
    assert differs_only_where_undefined(actual, expected, reference) is False


def test_the_console_the_record_and_the_report_tell_one_story(negation_dropped):
    import html

    from harness.report import render_html

    record, found = localized(NEGATED)
    data = record.to_dict()["first_divergent_kernel"]
    assert (data["answer"], data["stage"], data["graph_pass"], data["name"]) == (
        "stage",
        "inductor_graph_passes",
        negation_dropped,
        None,
    )
    assert data["compiles"] == found.compiles >= 3
    summary = record.summary()
    assert f"[{found.compiles} compiles]" in summary and "first divergent kernel" not in summary
    page = html.unescape(render_html([record], {}))
    assert f"stage: inductor_graph_passes ({negation_dropped})" in page
    assert "<h4>First divergent kernel" not in page and f"{found.compiles} compiles of the program" in page


def test_a_real_mixed_float16_float32_op_is_a_failure_named_at_its_kernel_and_dtype():
    # pytorch#197091: ldexp(float16, float32) is float32 in eager, float16 compiled, inf where eager is finite.
    record, found = localized(CASES["upstream_197091_ldexp_half_mantissa_float_exponent"], torch.float16)
    assert record.status == R.FAIL and record.error is None and record.stage == "compare"  # judged, not a crash
    assert (found.answer, found.nodes, found.stage) == (R.Answer.KERNEL, ["ldexp"], "inductor")
    assert "as float16 where the graph computes ldexp as float32" in found.isolated
    assert record.culprit_found


def test_a_stage_answer_never_calls_the_kernel_where_its_difference_shows_wrong():
    from harness.probe.kernel_rerun import WRONG, Isolation
    from harness.probe.search import _seen_at
    from harness.probe.probe import Divergence

    metrics = R.OutputComparison(
        name="buf0",
        dtype="float32",
        shape=[4],
        numel=4,
        bad=4,
        bad_pct=100.0,
        max_abs=1.0,
        max_rel=1.0,
        passed=False,
        rule="tolerance",
    )
    seen = _seen_at(
        Divergence(
            0,
            "forward 0",
            {"name": "cpp_fused_sin_0", "buffer": "buf0", "nodes": ["sin"], "metrics": metrics},
            Isolation(WRONG, "kernel is wrong: ..."),
        )
    )
    assert seen.kind == "drift" and "is not what is wrong" in seen.isolated and "kernel is wrong" not in seen.isolated
    found = R.Localization(answer=R.Answer.STAGE, diverged=True, stage="aot_eager", visible_at=seen)
    found.check("fail")
    seen.kind = WRONG
    with pytest.raises(AssertionError):
        found.check("fail")


# Emulation of a wrapper glue bug: every wrapper module loaded while the fixture is active builds its views with
# the storage offset dropped (`reinterpret_tensor(buf0, (7, 8), (1, 8), 1)` views from element 0). The kernels
# and the post-grad graph are right; the view the wrapper returns is not.
@pytest.fixture
def offsets_dropped(monkeypatch):
    from harness.inductor_compat import launches

    wrap = launches._wrap_module

    def wrap_with_wrong_views(module):
        original = getattr(module, "reinterpret_tensor", None)
        if original is not None and not getattr(module, "__harness_wrapped__", False):
            module.reinterpret_tensor = lambda t, size, stride, offset=0: original(t, size, stride, 0)
        wrap(module)

    monkeypatch.setattr(launches, "_wrap_module", wrap_with_wrong_views)


def doubled_then_sliced(x):
    return (x * 2.75).t()[1:]  # the output is a view of the kernel's buffer, from element 1


GLUE_BUG = Case(name="wrapper_glue_emulation", build=lambda d: Program(doubled_then_sliced, [contiguous((8, 8))]))


def test_right_graphs_with_wrong_glue_are_answered_the_wrappers_glue(offsets_dropped):
    with compile_caches_off():
        record, found = localized(GLUE_BUG)
    assert record.status == R.FAIL, record.summary()
    assert (found.answer, found.stage) == (R.Answer.STAGE, "wrapper_glue"), found.line()
    assert "the wrapper's glue is wrong" in found.reason and "not a kernel and not a graph pass" in found.reason


def test_a_graph_wrong_before_any_glue_is_not_blamed_on_the_glue(negation_dropped):
    record, found = localized(NEGATED)
    assert found.stage == "inductor_graph_passes" and "glue" not in (found.reason or ""), found.line()
