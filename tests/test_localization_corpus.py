"""Localization judged on programs it did not make: correct ones (never blamed) and real upstream bugs
(localized to the kernel holding the blamed op, or to the right stage)."""

import pytest
import torch

from harness import records as R
from harness.registry import load_registry
from harness.run.case import RunConfig, run_case

REGISTRY = load_registry()


def _heaviest_run(case):
    """One run per case: training when there is one, in the narrowest float dtype (the most rounding)."""
    mode = "training" if "training" in case.modes else case.modes[0]
    floats = [d for d in case.dtypes if d.is_floating_point]
    dtype = min(floats, key=lambda d: torch.finfo(d).bits) if floats else case.dtypes[0]
    return dtype, mode


CORRECT = sorted(REGISTRY.select(tags=["correct"]), key=lambda c: c.name)


def test_the_corpus_of_correct_programs_is_large_enough():
    assert len(CORRECT) >= 30


@pytest.mark.parametrize("case", CORRECT, ids=lambda c: c.name)
def test_a_correct_program_is_never_blamed(case):
    dtype, mode = _heaviest_run(case)
    record = run_case(case, dtype, mode, RunConfig(bisect="always"))
    found = record.first_divergent_kernel
    assert record.status == R.PASS, record.summary()
    assert (found.answer, found.diverged) == (R.Answer.NONE, False)
    # Probed everywhere, no kernel of a correct program differs from eager on exact inputs. (Rounding
    # that grows across kernels may show up as drift the outputs absorb: information, not blame.)
    blamed = [
        (a.name, a.buffer, a.bad, a.numel, a.isolated) for a in found.absorbed if a.kind not in ("drift", "immaterial")
    ]
    assert blamed == []
    assert found.compared_buffers > 0


UPSTREAM = sorted(REGISTRY.select(tags=["upstream"]), key=lambda c: c.name)


def _reproducing_here():
    runs = []
    for case in UPSTREAM:
        for dtype in case.dtypes:
            for mode in case.modes:
                known = case.known_failure(
                    device="cpu",
                    backend="inductor",
                    npu_backend=None,
                    dtype=str(dtype).removeprefix("torch."),
                    mode=mode,
                    emulation=None,
                    torch=torch.__version__,
                )
                if known is not None:
                    runs.append((case, dtype, mode))
    return runs


def test_upstream_bugs_fail_and_are_localized_where_they_are():
    runs = _reproducing_here()
    assert len({case.name for case, _, _ in runs}) >= 15
    named, missed = 0, []
    for case, dtype, mode in runs:
        record = run_case(case, dtype, mode, RunConfig(bisect=True))
        assert record.status == R.FAIL and record.error is None, record.summary()
        found = record.first_divergent_kernel
        # Every reproducing bug ends with a kernel, a named stage, or a named graph pass; never unlocalized.
        assert found.answer in (R.Answer.KERNEL, R.Answer.DRIFT, R.Answer.STAGE), record.summary()
        if found.answer == R.Answer.STAGE:
            assert found.stage in ("dynamo", "aot_eager", "aot_eager_decomp_partition", "inductor_graph_passes")
            assert found.name is None and found.compiles >= 2
        else:
            assert found.stage == "inductor" and found.name and found.graph_pass is None
        if record.culprit_found:
            named += 1
        else:
            missed.append(f"{record.run_id}: declared {case.culprit}, got {found.line()[:160]}")
    assert named >= 0.9 * len(runs), missed
