"""Localization to the first diverging kernel, on CPU Inductor (C++ and extern kernels)."""

import dataclasses
import random

import pytest
import torch

from harness import records as R
from harness.inputs import contiguous
from harness.registry import Case, Program, load_registry
from harness.runner import RunConfig, run_case

CASES = load_registry().cases
RELU_BUG = {"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"}  # Inductor's own codegen fault


def bisect(name, dtype, mode, bisect=True, **config):
    record = run_case(CASES[name], dtype, mode, RunConfig(bisect=bisect, **config))
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


def amplify(x, w):
    a = x @ w                      # launch 0, extern mm: exactly 32.0 everywhere
    return (a / 32.0 - 1.0) * 1e6  # launch 1: turns one ulp of `a` (3.8e-6) into 0.119


DRIFT = Case(name="drift", build=lambda d: Program(amplify, [contiguous((16, 32), fill="ones"),
                                                             contiguous((32, 16), fill="ones")]),
             reference="none")


def test_a_drift_is_traced_to_the_kernel_where_it_starts():
    record = run_case(DRIFT, torch.float32, "inference", RunConfig(bisect=True, inject="fault-ulp@0",
                                                                     compile_options={"max_autotune_gemm": False}))
    kernel = record.first_divergent_kernel
    assert record.status == R.FAIL
    # The mm's one-ulp error is within tolerance; the next kernel, computing right, amplifies it beyond.
    assert (kernel.answer, kernel.launch_index, kernel.name) == (R.Answer.DRIFT, 0, "extern_kernels.mm")
    assert kernel.visible_at.launch_index == 1 and "upstream drift amplified here" in kernel.visible_at.isolated
    assert "no single kernel is wrong beyond tolerance" in kernel.reason and record.summary().count("drift:") == 1


def amplify_reshaped(x, w):
    a = (x @ w).view(2, 8, 16)     # launch 1 updates the mm's buffer in place, under another name and shape
    return (a / 32.0 - 1.0) * 1e6


@pytest.mark.parametrize("program", [amplify, amplify_reshaped])
def test_an_in_place_kernel_after_a_drift_is_replayed_on_the_state_before_it(program):
    case = dataclasses.replace(DRIFT, build=lambda d: Program(program, DRIFT.build(d).inputs))
    record = run_case(case, torch.float32, "inference", RunConfig(bisect=True, inject="fault-ulp@0",
                                                                    compile_options={"max_autotune_gemm": False}))
    kernel = record.first_divergent_kernel
    assert (kernel.answer, kernel.launch_index) == (R.Answer.DRIFT, 0)
    assert kernel.visible_at.launch_index == 1 and "upstream drift amplified here" in kernel.visible_at.isolated


def test_an_in_place_kernel_whose_prior_state_is_unknown_is_not_called_wrong(monkeypatch):
    from harness.probe.regions import RegionMap

    monkeypatch.setattr(RegionMap, "_same_memory_write", lambda self, tensor: None)  # the prior state unmapped
    case = dataclasses.replace(DRIFT, build=lambda d: Program(amplify_reshaped, DRIFT.build(d).inputs))
    record = run_case(case, torch.float32, "inference", RunConfig(bisect=True, inject="fault-ulp@0",
                                                                    compile_options={"max_autotune_gemm": False}))
    kernel = record.first_divergent_kernel
    assert (kernel.answer, kernel.launch_index) == (R.Answer.DRIFT, 0)
    assert "the kernel reads its state before the launch, which has no eager twin" in kernel.visible_at.isolated


def two_matmuls_concatenated(x, w1, w2):
    # Inductor writes each mm straight into its slice of the cat's buffer: two kernels, one buffer.
    return torch.cat([x @ w1, x @ w2], dim=1) * 2


SLICED = Case(name="sliced", build=lambda d: Program(two_matmuls_concatenated, [
    contiguous((16, 8)), contiguous((8, 8)), contiguous((8, 8))]))


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


def test_a_write_nothing_announced_is_caught_and_probed_again_with_copies(monkeypatch):
    from harness.inductor_compat import GraphInfo

    monkeypatch.setattr(GraphInfo, "written_inputs", lambda self: set())  # as if the schema analysis missed it
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

    from harness.compare import Verdict
    from harness.inductor_compat import STATE_BEFORE_IN_PLACE, BufferFact
    from harness.probe.probe import KernelProbe, _Memory

    # as_strided_scatter lowered on CUDA: buf0 = clone(x) (a state no FX node holds), then buf1 (the
    # scatter, storage buf0) updates it in place.
    state = BufferFact("buf0", None, "buf0", unmapped_reason=STATE_BEFORE_IN_PLACE, completed_by=["buf1"])
    buffers = {"buf0": state, "buf1": BufferFact("buf1", "copy_", "buf0"), "buf2": BufferFact("buf2", "mul", "buf2")}
    call = SimpleNamespace(label="inference 0", info=SimpleNamespace(buffers=buffers))
    probe, buffer = KernelProbe(Verdict()), torch.zeros(8)
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
    from harness.probe.localize import _after_aot

    found = R.Localization(answer=R.Answer.UNLOCALIZED, diverged=True, launches=2, compared_buffers=1,
                           unmapped_buffers=1,
                           unmapped={"holds the state before the in-place part of its lowering": ["inference 0:buf0"]})
    found = _after_aot(found, None, superseded)
    assert found.answer == answer
    assert (found.stage == "inductor_graph_passes") == (answer == R.Answer.STAGE)


def test_an_eager_pass_lets_go_of_an_input_made_for_it_after_its_last_use():
    # A float64 pass runs on float64 copies of the graph's inputs: each should die where eager would free it.
    import weakref
    from collections import deque

    from torch.fx.experimental.proxy_tensor import make_fx

    from harness.probe.values import _Stepper

    gm = make_fx(lambda a, b: ((a * 2).sum() + 1) * b)(torch.ones(256), torch.ones(()))
    last = [node.name for node in gm.graph.nodes if node.op == "call_function"][-1]
    inputs = deque([torch.ones(256, dtype=torch.float64), torch.ones((), dtype=torch.float64)])
    first = weakref.ref(inputs[0])
    stepper = _Stepper(gm, inputs, {last})
    stepper.advance_to(last)
    assert first() is None  # `a` was last read by its sum: gone before the pass ends
    assert float(stepper.kept[last]) == 513.0


def deep_mlp(x, w1, w2, w3, w4):
    # Each layer's input is saved for the backward graph, which frees it once its weight gradient is made.
    for w in (w1, w2, w3, w4):
        x = torch.tanh(x @ w)
    return x.sum()


DEEP_MLP = Case(name="deep_mlp", modes=("training",), build=lambda d: Program(deep_mlp, [
    contiguous((64, 32))] + [contiguous((32, 32), requires_grad=True) for _ in range(4)]))


@pytest.fixture
def offloading(monkeypatch):
    """Released graph inputs moved to host memory on CPU runs too: the path device runs take."""
    from harness.probe import values

    monkeypatch.setattr(values, "OFFLOAD_ON_CPU", True)


def test_inputs_the_compiled_backward_let_go_of_move_to_host_memory(offloading, monkeypatch):
    from harness.probe import probe as probe_module
    from harness.probe.values import _OnHost

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
    assert found.unmapped_buffers == 0 and not found.problems
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
