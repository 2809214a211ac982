"""Localization to the first diverging kernel, on CPU Inductor (C++ and extern kernels)."""

import dataclasses
import random
from collections import Counter

import pytest
import torch

from harness import records as R
from harness.inputs import contiguous
from harness.registry import Case, Program, load_registry
from harness.run.case import RunConfig, run_case

CASES = load_registry().cases
RELU_BUG = {"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"}  # Inductor's own codegen fault
RELOWERED = "came from a cache entry without lowering facts"


def bisect(name, dtype, mode, bisect=True, **config):
    return bisect_case(CASES[name], dtype, mode, bisect, **config)


def bisect_case(case, dtype=torch.float32, mode="inference", bisect=True, **config):
    record = run_case(case, dtype, mode, RunConfig(bisect=bisect, **config))
    return record, record.first_divergent_kernel


@pytest.fixture(scope="module")
def clean_training_run():
    return bisect("relu_mlp", torch.float32, "training", bisect="always")


def test_clean_run_reports_no_divergent_kernel(clean_training_run):
    record, kernel = clean_training_run
    assert record.status == R.PASS
    assert kernel.diverged is False and kernel.answer == R.Answer.NONE and not kernel.absorbed
    assert kernel.graphs == ["forward 0", "backward 0"]
    assert kernel.compared_buffers > 10 and kernel.launches > 10 and kernel.unmapped_buffers == 0
    assert "bisect: no kernel output diverged" in record.summary()


def test_a_passing_run_is_not_probed_unless_asked():
    record, kernel = bisect("relu_mlp", torch.float32, "training")
    assert record.status == R.PASS and kernel is None


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_inductor_relu_codegen_fault_is_found_in_the_relu_kernel(mode):
    record, kernel = bisect("relu_mlp", torch.float32, mode, compile_options=RELU_BUG)
    assert record.status == R.FAIL
    assert kernel.answer == R.Answer.KERNEL and "relu" in kernel.name and "relu" in kernel.nodes
    assert "aten.relu.default" in kernel.aten_ops
    assert kernel.graph == ("inference 0" if mode == "inference" else "forward 0")
    assert kernel.isolated.startswith("kernel is wrong")
    assert kernel.stage == "inductor"
    assert kernel.source and kernel.buffers[0] in kernel.source
    assert kernel.reason.startswith("making its outputs eager")  # both ReLU kernels are wrong: the first is named


def _launch_indices():
    record, kernel = bisect("relu_mlp", torch.float32, "training", bisect="always")
    total = kernel.launches
    chosen = random.Random(20261130).sample(range(1, total - 1), 4)
    return [0, *chosen, total - 1]


@pytest.mark.parametrize("fault", ["offset", "scale", "nan", "ulp"])
@pytest.mark.parametrize("index", _launch_indices())
def test_fault_at_launch_k_is_answered_at_k(index, fault):
    """A fault at launch k (forward or backward, generated or extern) makes a failing run that names k."""
    record, kernel = bisect("relu_mlp", torch.float32, "training", inject=f"fault-{fault}@{index}")
    assert record.injection_stats.hits and record.injection_stats.hits[0].startswith(f"{index}:")
    if record.status == R.PASS:  # a fault the outputs absorb (a zero buffer scaled, one ulp): nothing to localize
        assert kernel is None
        return
    assert kernel.launch_index == index and kernel.answer in (R.Answer.KERNEL, R.Answer.DRIFT)
    assert kernel.name == record.injection_stats.hits[0].split(":", 1)[1]
    if fault != "ulp":
        assert kernel.answer == R.Answer.KERNEL and kernel.isolated.startswith("kernel is wrong")


@pytest.mark.parametrize("dtype, mode", [(torch.int64, "inference"), (torch.bfloat16, "inference")])
def test_faults_in_seed_cases_are_found(dtype, mode):
    name = "seed_index_as_strided_view" if dtype == torch.int64 else "seed_rmsnorm_weight_grad_small"
    record, kernel = bisect(name, dtype, mode, inject="fault-offset@0")
    assert kernel.answer == R.Answer.KERNEL and kernel.launch_index == 0


def test_boundary_downcast_names_the_kernel_that_reads_the_view():
    record, kernel = bisect("seed_index_as_strided_view", torch.int64, "inference", inject="boundary-downcast")
    assert kernel.answer == R.Answer.KERNEL and kernel.nodes == ["clone"]
    view_args = [a for a in kernel.args if a.role == "in"]
    assert view_args and view_args[0].stride == [98304, 16384, 64, 1] and view_args[0].buffer == "arg0_1"
    assert (kernel.metrics.bad, kernel.metrics.max_abs) == (2260992, 589824)
    assert "98304" in kernel.source  # the compile-time strides the kernel indexes with
    # What diverges is the launcher's emulation, and the answer says so.
    assert kernel.isolated == (
        "kernel as the emulated launcher (boundary-downcast) calls it, its 64-bit "
        "arguments narrowed at the launch boundary, is wrong: the launcher is what "
        "diverges, not the kernel's code"
    ), kernel.isolated
    assert len(kernel.isolated) <= 200


def norm_of_rows(x, w):
    return torch.sqrt((x * w).sum(-1))  # one kernel: mul and sum into an accumulator, then sqrt


NORM_OF_ROWS = Case(
    name="norm_of_rows",
    build=lambda d: Program(norm_of_rows, [contiguous((8, 64), dtype=d), contiguous((8, 64), dtype=d)]),
)


def test_the_answer_names_every_node_the_diverging_buffer_is_computed_from_in_its_kernel():
    # The fused kernel writes only sqrt's buffer; its reduction is computed in the same kernel. The answer names
    # the mul and the sum it is computed from, not sqrt alone.
    record, kernel = bisect_case(NORM_OF_ROWS, inject="fault-scale@0")
    assert record.status == R.FAIL and kernel.answer == R.Answer.KERNEL and kernel.launch_index == 0
    assert kernel.nodes == ["mul", "sum_1", "sqrt"], kernel.nodes
    assert kernel.aten_ops == ["aten.mul.Tensor", "aten.sqrt.default", "aten.sum.dim_IntList"]


def amplify(x, w):
    a = x @ w  # launch 0, extern mm: exactly 32.0 everywhere
    return (a / 32.0 - 1.0) * 1e6  # launch 1: turns one ulp of `a` (3.8e-6) into 0.119


DRIFT = Case(
    name="drift",
    build=lambda d: Program(amplify, [contiguous((16, 32), fill="ones"), contiguous((32, 16), fill="ones")]),
    reference="none",
)


def test_a_drift_is_traced_to_the_kernel_where_it_starts():
    record = run_case(
        DRIFT,
        torch.float32,
        "inference",
        RunConfig(bisect=True, inject="fault-ulp@0", compile_options={"max_autotune_gemm": False}),
    )
    kernel = record.first_divergent_kernel
    assert record.status == R.FAIL
    # The mm's one-ulp error is within tolerance; the next kernel, computing right, amplifies it beyond.
    assert (kernel.answer, kernel.launch_index, kernel.name) == (R.Answer.DRIFT, 0, "extern_kernels.mm")
    assert kernel.visible_at.launch_index == 1 and "upstream drift amplified here" in kernel.visible_at.isolated
    assert "no single kernel is wrong beyond tolerance" in kernel.reason and record.summary().count("drift:") == 1
    # The probe run, the search from where the difference was first seen (launch 1, then 0), the description
    # of launch 0 (a run of its own: no search run had launches before it made eager); no compile under the
    # stages before Inductor (the run with 0 made eager passed).
    assert (kernel.reruns, kernel.stages_checked) == (4, False)


def amplify_then_carry(x, w, v):
    a = (x @ w / 32.0 - 1.0) * 1e6  # launches 0 and 1: the drift above (eager: 0.0 everywhere)
    for _ in range(10):  # 20 more launches, each right on eager inputs, each off by what it reads
        a = torch.sin(a @ v)
    return a


def test_a_failing_runs_probe_stops_comparing_after_enough_differences_from_upstream(monkeypatch):
    from harness.probe import probe as probe_module

    isolated = []
    real_isolate = probe_module.isolate
    monkeypatch.setattr(
        probe_module, "isolate", lambda launch, *a, **k: isolated.append(launch.index) or real_isolate(launch, *a, **k)
    )
    case = Case(
        name="carried_drift",
        reference="none",
        build=lambda d: Program(
            amplify_then_carry,
            [contiguous((16, 32), fill="ones"), contiguous((32, 16), fill="ones"), contiguous((16, 16))],
        ),
    )
    record = run_case(
        case,
        torch.float32,
        "inference",
        RunConfig(bisect=True, inject="fault-ulp@0", compile_options={"max_autotune_gemm": False}),
    )
    kernel = record.first_divergent_kernel
    assert record.status == R.FAIL and kernel.launches == 22
    # The same answer as without the cap, from the same search...
    assert (kernel.answer, kernel.launch_index, kernel.name) == (R.Answer.DRIFT, 0, "extern_kernels.mm")
    assert (kernel.reruns, kernel.stages_checked) == (4, False)
    # ...but the probe isolated 8 of the 21 launches that differ. Then the search described launch 1, in the run
    # with launch 0 made eager (which passes: the answer is launch 0, not 1), and launch 0, in a run of its own.
    limit = probe_module.UPSTREAM_DIFFERENCES_COMPARED
    assert isolated == list(range(1, limit + 1)) + [1, 0], isolated
    assert [p for p in kernel.problems if RELOWERED not in p] == [
        f"launches after {limit} not compared: {limit} differences from upstream seen by then (kernels right on "
        "eager inputs, or not isolated); the search decides from there"
    ]


def amplify_reshaped(x, w):
    a = (x @ w).view(2, 8, 16)  # launch 1 updates the mm's buffer in place, under another name and shape
    return (a / 32.0 - 1.0) * 1e6


@pytest.mark.parametrize("program", [amplify, amplify_reshaped])
def test_an_in_place_kernel_after_a_drift_is_replayed_on_the_state_before_it(program):
    case = dataclasses.replace(DRIFT, build=lambda d: Program(program, DRIFT.build(d).inputs))
    record = run_case(
        case,
        torch.float32,
        "inference",
        RunConfig(bisect=True, inject="fault-ulp@0", compile_options={"max_autotune_gemm": False}),
    )
    kernel = record.first_divergent_kernel
    assert (kernel.answer, kernel.launch_index) == (R.Answer.DRIFT, 0)
    assert kernel.visible_at.launch_index == 1 and "upstream drift amplified here" in kernel.visible_at.isolated


def test_an_in_place_kernel_whose_prior_state_is_unknown_is_not_called_wrong(monkeypatch):
    from harness.probe.regions import RegionMap

    monkeypatch.setattr(RegionMap, "_same_memory_write", lambda self, tensor: None)  # the prior state unmapped
    case = dataclasses.replace(DRIFT, build=lambda d: Program(amplify_reshaped, DRIFT.build(d).inputs))
    record = run_case(
        case,
        torch.float32,
        "inference",
        RunConfig(bisect=True, inject="fault-ulp@0", compile_options={"max_autotune_gemm": False}),
    )
    kernel = record.first_divergent_kernel
    assert (kernel.answer, kernel.launch_index) == (R.Answer.DRIFT, 0)
    assert "the kernel reads its state before the launch, which has no eager twin" in kernel.visible_at.isolated


def two_matmuls_concatenated(x, w1, w2):
    # Inductor writes each mm straight into its slice of the cat's buffer: two kernels, one buffer.
    return torch.cat([x @ w1, x @ w2], dim=1) * 2


SLICED = Case(
    name="sliced",
    build=lambda d: Program(two_matmuls_concatenated, [contiguous((16, 8)), contiguous((8, 8)), contiguous((8, 8))]),
)


def test_a_buffer_written_a_slice_at_a_time_is_compared_slice_by_slice():
    clean = run_case(SLICED, torch.float32, "inference", RunConfig(bisect="always"))
    kernel = clean.first_divergent_kernel
    assert kernel.diverged is False and kernel.unmapped_buffers == 0
    assert [k.compared for k in kernel.kernels] == [1, 1, 1]
    faulted = run_case(SLICED, torch.float32, "inference", RunConfig(bisect=True, inject="fault-offset@1"))
    kernel = faulted.first_divergent_kernel
    assert (kernel.launch_index, kernel.name) == (1, "extern_kernels.mm")
    assert kernel.metrics.shape == [16, 8] and kernel.metrics.bad == 128


@torch.library.custom_op("harness_test::halve_", mutates_args=("x",))
def halve_(x: torch.Tensor) -> None:
    x.mul_(0.5)


def halve_then_sin(x):
    halve_(x)  # an ATen call in the wrapper writes the input itself: no kernel launch announces it
    return x.sin()


def scale_in_place(x):
    x.mul_(2)  # a generated kernel writes the input in place
    return x.cos()


WRITTEN_BY_ATEN = Case(name="written_by_aten", build=lambda d: Program(halve_then_sin, [contiguous((64,))]))
WRITTEN_BY_KERNEL = Case(name="written_by_kernel", build=lambda d: Program(scale_in_place, [contiguous((64,))]))
PROBED_AGAIN = "probed again with every graph input copied up front"


def clean_probe(case):
    record = run_case(case, torch.float32, "inference", RunConfig(bisect="always"))
    kernel = record.first_divergent_kernel
    assert record.status == R.PASS and kernel.answer == R.Answer.NONE and not kernel.absorbed
    return kernel


def test_an_input_the_graph_writes_is_copied_before_it_runs():
    assert not any(PROBED_AGAIN in p for p in clean_probe(WRITTEN_BY_ATEN).problems)


def test_an_input_a_launch_writes_is_copied_at_that_launch(monkeypatch):
    from harness.inductor_compat import GraphInfo

    monkeypatch.setattr(GraphInfo, "written_inputs", lambda self: set())  # leave the write to the launch
    assert not any(PROBED_AGAIN in p for p in clean_probe(WRITTEN_BY_KERNEL).problems)


def test_an_aten_fallback_writing_an_input_is_a_launch_that_announces_its_write(monkeypatch):
    from harness.inductor_compat import GraphInfo

    monkeypatch.setattr(GraphInfo, "written_inputs", lambda self: set())  # as if the schema analysis missed it
    kernel = clean_probe(WRITTEN_BY_ATEN)
    assert not any(PROBED_AGAIN in p for p in kernel.problems)
    assert [e.compared for e in kernel.kernels if e.fallback is not None] == [1]


def test_a_write_nothing_announced_is_caught_and_probed_again_with_copies(monkeypatch):
    from harness.inductor_compat import GraphInfo
    from harness.probe.probe import KernelProbe

    monkeypatch.setattr(GraphInfo, "written_inputs", lambda self: set())  # as if the schema analysis missed it
    monkeypatch.setattr(KernelProbe.on_launch, "handles_fallbacks", False)  # and the fallback's launch unseen
    assert any(PROBED_AGAIN in p for p in clean_probe(WRITTEN_BY_ATEN).problems)


def test_the_inputs_a_graph_writes_are_read_off_its_schemas():
    from torch.fx.experimental.proxy_tensor import make_fx

    from harness.inductor_compat import written_inputs

    def program(x, y, z):
        x[0].add_(1)  # through a view
        halve_(z.view(-1))
        return y.t() * 2

    gm = make_fx(program)(torch.ones(2, 3), torch.ones(3, 2), torch.ones(4))
    assert written_inputs(gm) == {0, 2}
    assert written_inputs(make_fx(lambda x: x.sin())(torch.ones(2))) == set()


def test_a_write_covers_a_lowering_state_only_where_it_stores_every_element():
    from harness.probe.probe import _Memory

    buffer = torch.zeros(4, 6)
    whole = _Memory.of(buffer)
    assert _Memory.of(buffer).covers(whole)
    assert _Memory.of(buffer.t()).covers(whole)  # the same elements, another order
    assert _Memory.of(buffer).covers(_Memory.of(buffer[1:3, 2:]))
    assert not _Memory.of(buffer[:2]).covers(whole)  # half of it
    assert not _Memory.of(buffer[:, ::2]).covers(_Memory.of(buffer[:, :5]))  # every other element, over its span
    assert not _Memory.of(torch.zeros(4, 6)).covers(whole)  # another storage
    row = torch.zeros(1, 3).expand(3, 3)  # stride 0: three elements, read three times
    assert _Memory.of(row).covers(_Memory.of(row))


def test_an_unmapped_lowering_state_counts_as_superseded_once_its_lowering_writes_it_over_whole():
    from types import SimpleNamespace

    from harness.judge.compare import VerdictPolicy
    from harness.inductor_compat import STATE_BEFORE_IN_PLACE, BufferFact
    from harness.probe.probe import KernelProbe, _Memory

    # as_strided_scatter lowered on CUDA: buf0 = clone(x) (a state no FX node holds), then buf1 (the
    # scatter, storage buf0) updates it in place.
    state = BufferFact("buf0", None, "buf0", unmapped_reason=STATE_BEFORE_IN_PLACE, completed_by=["buf1"])
    buffers = {"buf0": state, "buf1": BufferFact("buf1", "copy_", "buf0"), "buf2": BufferFact("buf2", "mul", "buf2")}
    call = SimpleNamespace(label="inference 0", info=SimpleNamespace(buffers=buffers))
    probe, buffer = KernelProbe(VerdictPolicy()), torch.zeros(8)
    probe._lowering_states[("inference 0", "buf0")] = [_Memory.of(buffer)]
    probe._write_over_lowering_states(call, "buf1", buffer[:4])  # part of it: still live
    probe._write_over_lowering_states(call, "buf2", buffer)  # another node's write (a reused buffer)
    probe._write_over_lowering_states(SimpleNamespace(label="forward 0", info=call.info), "buf1", buffer)
    assert probe.superseded == 0
    probe._write_over_lowering_states(call, "buf1", buffer)
    assert probe.superseded == 1 and probe._lowering_states[("inference 0", "buf0")] == []


def test_the_buffer_completing_an_in_place_lowering_is_recorded():
    from harness.inductor_compat import STATE_BEFORE_IN_PLACE, capture_graphs

    seen = {}

    def observer(info, args, call):
        seen.update(info.buffers)
        return call(args)

    def scatter_into_first_row(x, src):
        return torch.as_strided_scatter(x, src, (1, 3), (3, 1))

    torch._dynamo.reset()
    with capture_graphs(observer, cold=True):
        torch.compile(scatter_into_first_row)(torch.arange(3.0).expand(3, 3), torch.ones(1, 3))
    states = [fact for fact in seen.values() if fact.unmapped_reason == STATE_BEFORE_IN_PLACE]
    assert len(states) == 1 and states[0].completed_by
    assert all(seen[name].storage == states[0].name for name in states[0].completed_by)


@pytest.mark.parametrize("superseded, answer", [(0, R.Answer.UNLOCALIZED), (1, R.Answer.STAGE)])
def test_only_a_live_unmapped_buffer_keeps_an_all_eager_failure_from_the_graph_passes(superseded, answer):
    # On CUDA, as_strided_scatter of an expanded input is a copy kernel, then an in-place kernel on the same
    # buffer, and a wrong output layout (wrapper glue): the copy's state is unmapped, then written over whole.
    from harness.probe.search import _after_aot

    found = R.Localization(
        answer=R.Answer.UNLOCALIZED,
        diverged=True,
        launches=2,
        compared_buffers=1,
        unmapped_buffers=1,
        unmapped={"holds the state before the in-place part of its lowering": ["inference 0:buf0"]},
    )
    found = _after_aot(found, None, superseded)
    assert found.answer == answer
    assert (found.stage == "inductor_graph_passes") == (answer == R.Answer.STAGE)


def test_an_eager_pass_lets_go_of_an_input_made_for_it_after_its_last_use():
    # A float64 pass runs on float64 copies of the graph's inputs: each should die where eager would free it.
    import weakref
    from collections import deque

    from torch.fx.experimental.proxy_tensor import make_fx

    from harness.probe.node_values import _Stepper

    gm = make_fx(lambda a, b: ((a * 2).sum() + 1) * b)(torch.ones(256), torch.ones(()))
    last = [node.name for node in gm.graph.nodes if node.op == "call_function"][-1]
    inputs = deque([torch.ones(256, dtype=torch.float64), torch.ones((), dtype=torch.float64)])
    first = weakref.ref(inputs[0])
    stepper = _Stepper(gm, inputs, {last})
    stepper.advance_to(last)
    assert first() is None  # `a` was last read by its sum: gone before the pass ends
    assert float(stepper.kept[last]) == 513.0


def _chain(a, b):
    c = (a * 3).sin()
    d = c + a
    e = d.exp()
    return (e * b).sum()


def _chain_values(monkeypatch, program=_chain, wanted=()):
    """GraphValues over `program`'s graph, and a count of the nodes each graph (eager, float64) ran."""
    from collections import Counter

    from torch.fx.experimental.proxy_tensor import make_fx

    from harness.inductor_compat.graphs import GraphInfo
    from harness.probe import node_values as values_module

    a, b = torch.randn(64, generator=torch.Generator().manual_seed(0)), torch.full((64,), 0.5)
    gm = make_fx(program)(a, b)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    info = GraphInfo("chain", "inference", None, gm, placeholders, {}, [])
    ran: Counter = Counter()
    original = values_module._Stepper.run_node

    def run_node(self, node):
        ran["float64" if self.module is info.float64_gm() else "eager"] += node.op == "call_function"
        return original(self, node)

    monkeypatch.setattr(values_module._Stepper, "run_node", run_node)
    computed = [n.name for n in gm.graph.nodes if n.op == "call_function"]
    uses = Counter({name: 1 for name in wanted})
    return values_module.GraphValues(info, [a, b], set(wanted), uses), computed, ran, (a, b)


def test_float64_values_come_from_one_run_that_advances_with_the_requests(monkeypatch):
    # A model's graph can have a hundred buffers that need a float64 reference: each used to cost a
    # float64 copy of the graph and a run from the graph's start.
    from harness.inductor_compat import graphs
    from harness.probe import node_values as values_module

    copies = []
    original_copy = graphs.float64_copy
    monkeypatch.setattr(graphs, "float64_copy", lambda gm: copies.append(gm) or original_copy(gm))
    monkeypatch.setattr(values_module, "RECENTLY_USED_KEPT", 0)  # let go of a value at its last comparison
    values, computed, ran, (a, b) = _chain_values(monkeypatch)
    for name in computed:
        assert values.float64(name).dtype == torch.float64
    assert len(copies) == 1 and ran["float64"] == len(computed)
    last = values.float64(computed[-1])
    assert float(last) == pytest.approx(float(_chain(a.double(), b.double())), rel=1e-12)
    # A value the run has passed and let go of is computed again in a pass of its own, and is the same.
    first = values.float64(computed[0]).clone()
    values.uses[computed[0]] = 1
    values.used(computed[0])
    assert torch.equal(values.float64(computed[0]), first)
    assert len(copies) == 1 and ran["float64"] == len(computed) + 1
    # Freed as soon as the graph's call is over, without waiting for the garbage collector: on a device its
    # float64 run's values would otherwise stay allocated into the next graph.
    import gc
    import weakref

    gone = weakref.ref(values)
    gc.disable()
    try:
        del values
        assert gone() is None
    finally:
        gc.enable()


def test_a_describing_probes_float64_run_keeps_only_what_it_is_asked_for(monkeypatch):
    # A probe comparing every launch asks for many float64 values, not in graph order, so the float64 run keeps
    # the wanted values it passes; one describing a single launch asks for that launch's only.
    from harness.probe import node_values as values_module

    for ahead in (True, False):
        values, computed, ran, (a, b) = _chain_values(monkeypatch, wanted=[])
        values = values_module.GraphValues(values.info, [a, b], set(computed), Counter(computed), float64_ahead=ahead)
        assert values.float64(computed[-1]) is not None
        kept = set(values._stepper64.kept)
        assert kept == (set(computed) if ahead else {computed[-1]}), (ahead, kept)


def test_a_pass_makes_an_input_on_its_first_use_only(offloading, monkeypatch):
    # An input on host memory comes back only when a pass reaches its first use; a pass stopping before
    # that never brings it back.
    from harness.probe.node_values import _OnHost

    values, computed, ran, (a, b) = _chain_values(monkeypatch)
    brought_back = []
    monkeypatch.setattr(_OnHost, "back", lambda self, back=_OnHost.back: brought_back.append(self) or back(self))
    values.inputs[1] = _OnHost(b.untyped_storage(), b)
    b_node = [n for n in values.info.gm.graph.nodes if n.op == "placeholder"][1]
    reads_b = next(n.name for n in values.info.gm.graph.nodes if b_node in n.all_input_nodes)
    assert computed.index(reads_b) > 0
    assert values.float64(computed[0]) is not None and brought_back == []
    assert values.float64(reads_b) is not None and len(brought_back) == 1
    assert torch.equal(values.float64(computed[-1]), _chain(a.double(), b.double()))
    assert len(brought_back) == 1  # the float64 run went on from where it was


def _two_branches(a, b):
    side = (b * 2).cos()  # computed between the two steps of the main branch, not read by it
    main = a.sin()
    return (main + 1).exp(), side


def test_a_pass_of_a_graph_without_in_place_writes_runs_only_what_its_values_come_from(monkeypatch):
    from harness.probe import node_values as values_module

    monkeypatch.setattr(values_module, "RECENTLY_USED_KEPT", 0)
    values, computed, ran, (a, b) = _chain_values(monkeypatch, _two_branches, wanted=["exp"])
    assert values.info.functional()
    last = computed[-1]
    assert last == "exp"
    values.value(last)  # the in-step run: every node up to it
    assert ran["eager"] == len(computed)
    values.used(last)
    again = values.value(last)  # let go of: a pass of its own, through sin, add and exp only
    assert ran["eager"] == len(computed) + 3
    assert torch.equal(again, (a.sin() + 1).exp())


def _passes_per_replay(monkeypatch, case: str) -> list[list[int]]:
    """A passing `--bisect always` run of `case`; for each replay, the number of nodes each eager pass
    of its own (from the graph's start) was asked for."""
    from harness.probe import kernel_rerun as isolation
    from harness.probe import probe as probe_module
    from harness.probe.node_values import GraphValues

    passes: list[int] = []
    per_replay: list[list[int]] = []
    original_interpret, original_replay = GraphValues._interpret, isolation.replay

    def interpret(self, gm, inputs, keep, float64=False):
        passes.append(len(keep))
        return original_interpret(self, gm, inputs, keep, float64)

    def replay(*args, **kwargs):
        start = len(passes)
        try:
            return original_replay(*args, **kwargs)
        finally:
            per_replay.append(passes[start:])

    monkeypatch.setattr(GraphValues, "_interpret", interpret)
    monkeypatch.setattr(isolation, "replay", replay)
    monkeypatch.setattr(probe_module, "replay", replay)
    record = run_case(CASES[case], torch.float32, "inference", RunConfig(bisect="always"))
    assert record.status == R.PASS and record.first_divergent_kernel.answer == R.Answer.NONE
    assert per_replay  # its lowering makes intermediates without an eager twin: their launches are replayed
    return per_replay


def test_a_replay_fetches_every_input_let_go_of_in_one_pass(monkeypatch):
    # Checking each argument's region computed its value on its own: one pass from the graph's start per
    # input already let go of, before the replay's own one-pass prefetch could run.
    from harness.probe import node_values as values_module

    monkeypatch.setattr(values_module, "RECENTLY_USED_KEPT", 0)
    per_replay = _passes_per_replay(monkeypatch, "correct_mlp_layernorm_gelu")
    assert any(sum(p) > 1 for p in per_replay), per_replay  # a replay needed several values back
    assert all(len(p) <= 1 for p in per_replay), per_replay


def test_a_replay_reads_values_compared_just_before_without_a_pass(monkeypatch):
    # The inputs of a replayed launch were made, and compared for the last time, by the launches just before.
    per_replay = _passes_per_replay(monkeypatch, "correct_mlp_layernorm_gelu")
    assert all(passes == [] for passes in per_replay), per_replay


def deep_mlp(x, w1, w2, w3, w4):
    # Each layer's input is saved for the backward graph, which frees it once its weight gradient is made.
    for w in (w1, w2, w3, w4):
        x = torch.tanh(x @ w)
    return x.sum()


DEEP_MLP = Case(
    name="deep_mlp",
    modes=("training",),
    build=lambda d: Program(
        deep_mlp, [contiguous((64, 32))] + [contiguous((32, 32), requires_grad=True) for _ in range(4)]
    ),
)


@pytest.fixture
def offloading(monkeypatch):
    """Released graph inputs moved to host memory on CPU runs too: the path device runs take."""
    from harness.probe import node_values as values

    monkeypatch.setattr(values, "OFFLOAD_ON_CPU", True)


def test_values_kept_ahead_of_their_launch_wait_in_host_memory(offloading, monkeypatch):
    # A launch asking first for the graph's last value makes the stepper run, and keep, every wanted value
    # before it: on a device those beyond the first few go to host memory, and come back as they were.
    from harness.probe import node_values as values_module
    from harness.probe.node_values import _OnHost

    monkeypatch.setattr(values_module, "AHEAD_KEPT_ON_DEVICE", 1)
    values, computed, ran, (a, b) = _chain_values(monkeypatch, wanted=[])
    reference = values_module._Stepper(values.info.gm, [a, b], set(computed))  # nothing moved: each value as it is
    reference.advance_to(computed[-1])
    expected = dict(reference.kept)
    ran.clear()
    for name in computed:
        values._stepper.want(name)
    brought_back = []
    monkeypatch.setattr(_OnHost, "back", lambda self, back=_OnHost.back: brought_back.append(self) or back(self))
    assert torch.equal(values.value(computed[-1]), expected[computed[-1]])
    kept = values._stepper.kept
    on_host = [name for name in computed[:-1] if isinstance(kept[name], _OnHost)]
    assert on_host == computed[1:-1]  # the first value ahead stays, the target stays
    for name in computed:
        assert torch.equal(values.value(name), expected[name]), name
    assert len(brought_back) == len(on_host)
    assert ran["eager"] == len(computed)  # each ran once: none was computed again in a pass of its own


def test_inputs_the_compiled_backward_let_go_of_move_to_host_memory(offloading, monkeypatch):
    from harness.probe import probe as probe_module
    from harness.probe.node_values import _OnHost

    on_host: list[int] = []
    original_after = probe_module.KernelProbe._after

    def after(self, launch, call):
        original_after(self, launch, call)
        if call.info.kind == "backward":
            on_host.append(sum(isinstance(value, _OnHost) for value in call.values.inputs))

    monkeypatch.setattr(probe_module.KernelProbe, "_after", after)
    record = run_case(DEEP_MLP, torch.float32, "training", RunConfig(bisect="always"))
    found = record.first_divergent_kernel
    assert record.status == R.PASS and found.answer == R.Answer.NONE and not found.absorbed
    # (A cache entry from before a change to the harness's lowering facts is lowered again, and says so.)
    assert found.unmapped_buffers == 0 and not [p for p in found.problems if RELOWERED not in p]
    # The compiled backward frees the saved activations one by one; the probe moves each off the device.
    assert on_host[0] < on_host[-1] and on_host[-1] >= 3, on_host


@pytest.mark.parametrize("fault", ["offset", "scale"])
def test_a_backward_fault_gets_the_same_answer_with_released_inputs_on_host(offloading, fault):
    # Isolating a backward kernel needs eager values computed again from the graph's inputs, some of which
    # the compiled graph has let go of by then: they come back from host memory.
    clean, kernel = bisect("relu_mlp", torch.float32, "training", bisect="always")
    backward = [entry.index for entry in kernel.kernels if entry.graph.startswith("backward")]
    index = backward[len(backward) * 2 // 3]
    record, found = bisect("relu_mlp", torch.float32, "training", inject=f"fault-{fault}@{index}")
    assert record.status == R.FAIL
    assert found.launch_index == index and found.answer in (R.Answer.KERNEL, R.Answer.DRIFT), found.line()


class _ManyLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(24))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


MANY_PARAMETERS = Case(
    name="many_parameters", modes=("train_step",), build=lambda d: Program(_ManyLayers().to(d), [contiguous((4, 8))])
)


def test_a_write_into_a_shared_input_moves_only_the_values_on_its_storage(monkeypatch):
    # The optimizer step writes every parameter in place: each write moves what eager holds on that storage
    # to a copy. Visiting every value the graph holds at each write made a large model's step quadratic.
    from harness.probe import node_values as values

    visits = {"writes": 0, "values": 0}
    real_mover = values._mover

    def counting_mover(key, copy):
        moved = real_mover(key, copy)
        visits["writes"] += 1

        def counted(value):
            visits["values"] += 1
            return moved(value)

        return counted

    monkeypatch.setattr(values, "_mover", counting_mover)
    record = run_case(MANY_PARAMETERS, torch.float32, "train_step", RunConfig(bisect="always"))
    found = record.first_divergent_kernel
    assert record.status == R.PASS and found.answer == R.Answer.NONE and not found.absorbed, record.summary()
    assert visits["writes"] >= 48  # 24 weights and 24 biases, each written by the step
    assert visits["values"] <= 4 * visits["writes"], visits


@pytest.mark.parametrize(
    "culprit, hint, most_runs",
    [
        (7, 7, 2),  # the difference starts where it was first seen: confirmed in two runs
        (0, 0, 1),
        (7, 3, 7),  # an earlier difference the outputs absorb: searched after it
        (7, 12, 7),  # first seen after where it matters (an unmapped buffer carried it): searched before
        (7, None, 6),
        (None, 5, 2),  # nothing makes the outputs pass
    ],
)
def test_the_search_for_where_a_difference_matters_tries_the_first_divergence_first(culprit, hint, most_runs):
    from harness.probe.search import LocalizationHooks, _first_that_matters, _Substitution

    runs, described = [], []

    def rerun(probe):
        runs.append(max(probe.substitute, default=-1))
        described.extend(probe.describe)
        return culprit is not None and runs[-1] >= culprit

    program = LocalizationHooks(
        rerun=rerun, passes=bool, moved=bool, diverges_under=lambda backend: False, injection=lambda: None
    )
    search = _Substitution(program, None, 19)
    assert _first_that_matters(search, hint) == culprit
    assert len(runs) <= most_runs, runs
    # Only the run that can decide that the answer is the hint (launches 0..hint-1 eager) describes it: a
    # description costs that run eager and float64 values up to the launch, wasted on the other search runs.
    assert described == ([hint] if hint and culprit is not None and hint - 1 in runs else []), (runs, described)
    if culprit is not None:
        count = len(runs)
        search.described(culprit)
        # Reused when the hint's own runs decided (launch 0 has no run with launches before it eager).
        assert len(runs) == count + (culprit != hint or culprit == 0)


def absorbed_then_doubled(x, w1, w2):
    a = x @ w1  # launch 0, an mm: whatever it computes, the clamp below makes every element 1e4
    return torch.clamp(a, min=1e4) @ w2


def test_a_wrong_kernel_the_outputs_absorb_is_passed_over_for_the_next():
    case = Case(
        name="absorbed_then_wrong",
        modes=("inference",),
        build=lambda d: Program(
            absorbed_then_doubled, [contiguous((8, 16)), contiguous((16, 16)), contiguous((16, 8))]
        ),
    )
    record = run_case(
        case,
        torch.float32,
        "inference",
        RunConfig(bisect=True, inject="fault-scale@extern_kernels.mm", compile_options={"max_autotune_gemm": False}),
    )
    found = record.first_divergent_kernel
    assert record.status == R.FAIL
    assert (found.answer, found.launch_index, found.launches) == (R.Answer.KERNEL, 2, 3)
    assert found.name == "extern_kernels.mm"
    assert [p for p in found.problems if RELOWERED not in p] == [
        "inference 0 launch 0 extern_kernels.mm differs on exact inputs, but making its outputs eager changes no "
        "failing output beyond tolerance (the outputs absorb its difference, or later kernels spoil the same "
        "elements; its other launches are not tried)"
    ]
    # The probe run (stops at launch 0); launch 0 made eager, which moves no output; the probe run again from
    # launch 0 (launch 2 is the same kernel: not a candidate, but the next difference); the search from
    # launch 2, not from the immaterial launch 0: 2 passes, 1 fails and describes launch 2.
    assert (found.reruns, found.stages_checked) == (5, False)


def _two_chains(x, y, w):
    return (x + 1).sin(), torch.mm(y, w)  # two launches: a generated kernel and an extern one


def test_a_kernel_that_moves_only_passing_results_is_not_blamed_for_a_failing_one(monkeypatch):
    # Seen on CUDA: the eager twin of a kernel's buffer came from a post-grad graph that already differs from
    # the program there, so the kernel looked wrong on exact inputs, and making its outputs eager moved a
    # gradient that had passed; the kernel was named for a failing output it never touched. Here the first
    # launch's eager twin is made wrong on purpose; the fault is in the other chain's kernel.
    from harness.probe import node_values as values_module

    case = Case(
        name="two_chains",
        modes=("inference",),
        build=lambda d: Program(_two_chains, [contiguous((64,)), contiguous((8, 8)), contiguous((8, 8))]),
    )
    clean, kernels = bisect_case(case, bisect="always")
    assert clean.status == R.PASS and len(kernels.kernels) == 2
    twisted: list[str] = []

    def twist(original):
        def value(self, node):
            found = original(self, node)
            if not twisted:
                twisted.append(node)  # the first value asked for: the first launch's buffer
            return found + 1 if node == twisted[0] and found is not None else found

        return value

    for name in ("value", "float64"):  # the eager twin and its float64 reference alike
        monkeypatch.setattr(values_module.GraphValues, name, twist(getattr(values_module.GraphValues, name)))
    record, found = bisect_case(case, inject="fault-offset@1")
    failing = [o.name for o in record.outputs if not o.passed]
    assert record.status == R.FAIL and len(failing) == 1
    assert (found.answer, found.launch_index) == (R.Answer.KERNEL, 1), found.line()
    assert any("changes no failing output" in p for p in found.problems), found.problems
