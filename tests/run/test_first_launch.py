"""A kernel wrong on its first launch only (triton-ascend #2292: the first launch after loading drops the stores
of some programs; launched again it is right) is a failure with symptom `first-launch`, not nondeterminism.

The fault here is a launch handler that corrupts what each kernel writes the first time it is called after its
wrapper module loaded (each load makes its kernels afresh), and never again.
"""

import pytest
import torch

from harness.inject import launch as emulation
from harness import records as R
from harness.inject.launch import Injection
from harness.inputs import contiguous
from harness.records import InjectionStats
from harness.registry import Case, Program, load_registry
from harness.run.case import RunConfig, run_case


class WrongOnFirstCall:
    """Adds 1 to what a generated kernel writes on the first call of it as loaded; later calls are right."""

    loaded_and_called: list = []  # kernels (as each module load made them) already called once

    def __init__(self, selector):
        self.stats = InjectionStats(hits=[])

    def __call__(self, launch):
        result = launch.run()
        called = any(kernel is launch.kernel for kernel in self.loaded_and_called)
        if launch.replay or launch.kernel.kind == "extern" or called:
            return result
        self.loaded_and_called.append(launch.kernel)
        self.stats.hits.append(f"{launch.index}:{launch.kernel.name}")
        for _, written in launch.written():
            written.add_(1)
        return result


@pytest.fixture
def first_call_wrong(monkeypatch):
    monkeypatch.setitem(
        emulation.INJECTIONS,
        "test-first-call-wrong",
        Injection("test-first-call-wrong", "a kernel's first call after loading writes wrong values", WrongOnFirstCall),
    )
    return "test-first-call-wrong"


MLP = Case(
    name="first_launch_mlp",
    build=lambda d: Program(
        lambda x, w: torch.relu(x @ w).sum(dim=-1) * 2, [contiguous((16, 32)), contiguous((32, 8))]
    ),
)


def test_a_divergence_of_first_launches_is_a_failure_not_nondeterminism(first_call_wrong):
    record = run_case(MLP, torch.float32, "inference", RunConfig(inject=first_call_wrong))
    assert (record.status, record.symptom, record.reproduced, record.diverged_runs) == (
        R.FAIL,
        R.Symptom.FIRST_LAUNCH,
        True,
        [1, 3],
    ), record.summary()
    assert "diverges on its kernels' first launches only" in record.diagnosis
    assert record.timings["first_launch"] > 0


def test_the_probe_judges_first_launches_and_names_the_kernel(first_call_wrong):
    record = run_case(MLP, torch.float32, "inference", RunConfig(inject=first_call_wrong, bisect=True))
    assert (record.status, record.symptom) == (R.FAIL, R.Symptom.FIRST_LAUNCH), record.summary()
    found = record.first_divergent_kernel
    # Launch 0 is the mm, a library call the fault leaves alone; launch 1, the one generated kernel, is corrupted.
    assert found.answer == R.Answer.KERNEL, found.line()
    assert (found.launch_index, found.kind) == (1, "cpp") and record.injection_stats.hits == [f"1:{found.name}"]
    assert found.isolated.startswith("kernel is wrong on its first launch"), found.isolated


def test_a_divergence_that_does_not_come_back_after_a_fresh_load_is_a_run_to_run_failure(monkeypatch):
    class OnceInTheProcess(WrongOnFirstCall):
        done: list = []

        def __call__(self, launch):
            if self.done or launch.replay or launch.kernel.kind == "extern":
                return launch.run()
            self.done.append(launch.kernel)
            self.stats.hits.append(f"{launch.index}:{launch.kernel.name}")
            result = launch.run()
            for _, written in launch.written():
                written.add_(1)
            return result

    monkeypatch.setitem(emulation.INJECTIONS, "test-once", Injection("test-once", "once", OnceInTheProcess))
    record = run_case(MLP, torch.float32, "inference", RunConfig(inject="test-once"))
    assert (record.status, record.symptom, record.reproduced, record.diverged_runs) == (
        R.FAIL,
        R.Symptom.RUN_TO_RUN,
        False,
        [1],
    ), record.summary()


def test_a_correct_program_pays_nothing_for_the_check():
    record = run_case(load_registry().cases["relu_mlp"], torch.float32, "training", RunConfig(bisect=True))
    assert record.status == R.PASS and "first_launch" not in record.timings
