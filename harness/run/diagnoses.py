"""What a divergence is, beyond its values: undefined elements, a wrong layout or dtype, narrowing, a result
that comes from the compile caches, a retry that does not diverge again (run to run, first launches)."""

from __future__ import annotations

import torch

from harness import records as R
from harness.inject.launch import NARROWED_DTYPES
from harness.judge.compare import VerdictPolicy, differs_only_where_undefined
from harness.judge.values import all_pass
from harness.judge.values import result_pairs as _result_pairs
from harness.layout import clone_exact
from harness.run.config import RunConfig
from harness.run.errors import timed_stage
from harness.run.program import Session, module_state
from harness.run.sides import (
    CompiledSide,
    EagerSide,
    compile_kwargs,
    launches_through,
    loaded_afresh,
    self_overlapping_outputs,
)


def undefined_results(observed: EagerSide, compiled: CompiledSide) -> list[str]:
    """The failing results, if every one differs only where neither side nor float64 has a value
    (`differs_only_where_undefined`) and the inputs are finite; empty otherwise (a NaN input's NaN must
    propagate)."""
    failing = {o.name for o in compiled.comparisons if not o.passed}
    if any(o.bad != o.nan_mismatch + o.inf_mismatch for o in compiled.comparisons if o.name in failing):
        return []  # a finite element fails too: judged as it is
    module = observed.program.fn if isinstance(observed.program.fn, torch.nn.Module) else None
    tensors = [t for _, t in observed.inputs.named_tensors()] + [t for _, t in module_state(module)]
    if not all(bool(t.isfinite().all()) for t in tensors if t.is_floating_point()):
        return []
    if observed.references is None and not observed.make_references():
        return []
    undefined = [
        name
        for name, actual, expected, reference in _result_pairs(compiled.results, observed.expected, observed.references)
        if name in failing and differs_only_where_undefined(actual, expected, reference, observed.verdict.tolerances)
    ]
    return undefined if len(undefined) == len(failing) else []


def overlapping_compiled_results(observed: EagerSide, compiled: CompiledSide) -> str | None:
    """What to say of failing results the compiled program wrote into memory whose elements overlap, where
    eager's do not: writes into such a result collide (a scatter given an expanded input's stride-0 layout)."""
    failing = {c.name for c in compiled.comparisons if not c.passed}
    names = [name for name in self_overlapping_outputs(compiled.results, compiled.session) if name in failing]
    if not names:
        return None
    strides = ", ".join(
        f"{name} {tuple(compiled.results.values[name].stride())} where eager's is "
        f"{tuple(observed.expected.values[name].stride())}"
        for name in names[:3]
        if isinstance(observed.expected.values.get(name), torch.Tensor)
    )
    return (
        f"the compiled result is laid out with elements sharing memory ({strides}): its writes collide, so "
        "its layout is wrong before its values are (as when a scatter keeps an expanded input's strides)"
    )


def retyped_results(observed: EagerSide, compiled: CompiledSide) -> bool:
    """Whether a failing tensor result has another dtype than eager's (a type promotion lost)."""
    failing = {c.name for c in compiled.comparisons if not c.passed}
    return any(
        isinstance(a := compiled.results.values.get(name), torch.Tensor)
        and isinstance(e := observed.expected.values.get(name), torch.Tensor)
        and a.dtype != e.dtype
        for name in failing
    )


def narrowing_visible(record: R.CaseResult) -> bool:
    """Something for narrowing to explain: a failure, or an inexact 64-bit result."""
    return any(not o.passed or (o.dtype in ("int64", "float64") and (o.max_abs > 0 or o.bad)) for o in record.outputs)


def narrowing_diagnosis(observed: EagerSide, compiled: CompiledSide) -> str:
    """Tell precision narrowing from misaddressing: compare compiled with eager on narrowed inputs.

    If every compiled value equals eager computed from int32/float32-rounded
    inputs (float64 outputs within float32's tolerance), the only cause is
    narrowing; elements that still differ were read or written at wrong addresses.
    """
    from harness.judge.tolerances import DEFAULT_TOLERANCES

    narrowed_inputs = observed.inputs.map_tensors(
        lambda t: (
            clone_exact(clone_exact(t, NARROWED_DTYPES[t.dtype]), t.dtype)
            if t.dtype in NARROWED_DTYPES
            else clone_exact(t)
        )
    )
    narrowed = (
        Session(observed.program.fn, narrowed_inputs, observed.mode, observed.device, observed.seed).run().tensors()
    )
    verdict = VerdictPolicy({torch.float64: DEFAULT_TOLERANCES[torch.float32]})
    actual = compiled.results.tensors()
    wrong = {
        name: bad
        for name in narrowed
        if name in actual
        if (bad := verdict.tensors(name, actual[name], narrowed[name]).bad)
    }
    if not wrong:
        return (
            "precision narrowing, not layout: every compiled value equals eager on int32/float32-narrowed "
            "inputs (float64 within float32 tolerance)"
        )
    details = ", ".join(f"{name}: {bad} elements" for name, bad in wrong.items())
    return (
        "layout: values differ from eager even on narrowed inputs, so they were read or written at wrong "
        f"addresses ({details})"
    )


def passes_compiled_afresh(observed: EagerSide, config: RunConfig, record: R.CaseResult) -> bool:
    """Whether the program, compiled again with Inductor's and AOT autograd's caches off, passes."""
    from harness.inductor_compat import compile_caches_off

    torch.compiler.reset()
    try:
        with timed_stage("fresh_compile", record.timings, wrap=False), compile_caches_off():
            session = observed.compiled_session(config.backend, **compile_kwargs(config, record.compile_options))
            results = session.run()
    except Exception:  # no answer from this check: the verdict and the other diagnoses stand
        return False
    return all_pass(results, observed.expected, observed.references, observed.verdict)


def say_low_precision_atomics(observed: EagerSide, record: R.CaseResult) -> None:
    """A run that failed, or passed by the rounding of its float16/bfloat16 atomic adds, names those adds."""
    found = observed.low_precision_atomics
    by_rounding = [o.name for o in record.outputs if o.passed_by == R.PASSED_BY_LOW_PRECISION_ATOMICS]
    if not found or (record.status != R.FAIL and not by_rounding):
        return
    shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    said = (
        f"the compiled program adds atomically in low precision ({shown}): every add rounds to that dtype, in "
        "an order that changes from run to run, where eager sums in a fixed order (on a GPU, in float32)"
    )
    if by_rounding:
        said += (
            f"; {', '.join(by_rounding[:4])} passed within that rounding (passed_by low_precision_atomics: "
            "no further from float64 than eager with each such sum made one add at a time in its dtype)"
        )
    record.diagnosis = f"{record.diagnosis}; {said}" if record.diagnosis else said


def reproduces(observed: EagerSide, compiled: CompiledSide) -> tuple[bool, bool]:
    """Whether the compiled program, run once more (no recompilation), diverges again; and whether its result
    differs from the first run's (by the verdict's tolerances, as eager's two runs are compared)."""
    with launches_through(compiled.handler_factory()):
        again = compiled.session.run()
    return (
        not all_pass(again, observed.expected, observed.references, observed.verdict),
        not all_pass(again, compiled.results, None, observed.verdict),
    )


def first_launches_fail(observed: EagerSide, compiled: CompiledSide, config: RunConfig, record: R.CaseResult) -> bool:
    """Whether a divergence that did not come back on a second run is one of first launches: loaded afresh
    (caches warm, every kernel made anew, as a new process would load it), the program fails again on its
    first run and passes on the next. If so the run fails with symptom `first-launch`, and the compiled side
    is the program loaded afresh (every later probe run loads it afresh too)."""
    try:
        with timed_stage("first_launch", record.timings, wrap=False):
            session = loaded_afresh(observed, config, record)
            outcomes = []
            for _ in range(2):
                with launches_through(compiled.handler_factory()):
                    outcomes.append(all_pass(session.run(), observed.expected, observed.references, observed.verdict))
    except Exception:  # noqa: BLE001 - no answer from this check: the run stays what the retry made it
        return False
    if outcomes != [False, True]:
        return False
    compiled.session, compiled.first_launch = session, True
    record.reproduced, record.diverged_runs = True, [1, 3]
    record.conclude(record.status, record.stage, R.Symptom.FIRST_LAUNCH)
    said = (
        "the compiled program diverges on its kernels' first launches only: run again it passed; loaded "
        "afresh (its kernels made anew, the compile caches warm) it diverged again on its first run and "
        "passed on the next"
    )
    record.diagnosis = f"{record.diagnosis}; {said}" if record.diagnosis else said
    return True


def settle_reproduction(record: R.CaseResult, reproduced: bool, runs_differ: bool | None = None) -> None:
    """A divergence retried: the run stays a failure. A compiled result that changes from run to run while
    eager's does not (eager ran twice alike, or the run would be `nondeterministic` already) is a compiler
    bug, with symptom `run-to-run`."""
    record.reproduced = reproduced
    record.diverged_runs = [1, 2] if reproduced else [1]
    if reproduced and not runs_differ:
        return
    record.conclude(record.status, record.stage, R.Symptom.RUN_TO_RUN)
    said = (
        "the compiled result changes from run to run while eager's does not: "
        + (
            "runs 1 and 2 (no recompilation) both diverged, with different results"
            if reproduced
            else "run 1 diverged, run 2 (no recompilation) passed"
        )
        + " (a race, a read of memory the program never wrote, stores that land at random)"
    )
    record.diagnosis = f"{record.diagnosis}; {said}" if record.diagnosis else said
