"""A run gathers facts and gives no verdict; whoever runs it decides it, once."""

import torch

from harness import Program, case, contiguous
from harness import records as R
from harness.judge import decision
from harness.judge.known_failures import Expectations, KnownFailure
from harness.run.case import RunConfig, gather, run_case

EAGER = RunConfig(backend="eager")


@case(known_failures=(KnownFailure("tracked", backend="eager"),))
def diverges_when_compiled(dtype):
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])


def test_a_gathered_run_is_undecided_and_says_what_it_found():
    record = gather(diverges_when_compiled, torch.float32, "inference", EAGER)
    assert (record.status, record.stage, record.symptom) == (None, None, None)
    assert record.facts.compared and record.facts.failing == ["out0"] and not record.facts.nondeterministic
    assert record.outputs and not record.outputs[0].passed


def test_run_case_decides_each_run_once(monkeypatch):
    calls = []
    real = decision.decide

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(decision, "decide", counted)
    expectation = Expectations().for_case(diverges_when_compiled)
    record = run_case(diverges_when_compiled, torch.float32, "inference", EAGER, expectation)
    assert (record.status, record.symptom, record.reason) == (R.XFAIL, "divergence", "tracked")
    assert len(calls) == 1
