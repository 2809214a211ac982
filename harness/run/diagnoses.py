"""What a divergence is, beyond its values: undefined elements, a wrong layout or dtype, narrowing, a result
that comes from the compile caches, a retry that does not diverge again (run to run, first launches)."""

from __future__ import annotations

import torch

from harness import records as R
from harness.judge.decision import outcome
from harness.inject.launch import NARROWED_DTYPES
from harness.judge.compare import VerdictPolicy, differs_only_where_undefined
from harness.judge.results import Results
from harness.judge.sent_values import all_pass
from harness.judge.sent_values import result_pairs as _result_pairs
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


def undefined_results(eager_side: EagerSide, compiled: CompiledSide) -> list[str]:
    """The failing results, if every one differs only where neither side nor float64 has a value
    (`differs_only_where_undefined`) and the inputs are finite; empty otherwise (a NaN input's NaN must
    propagate)."""
    failing = {o.name for o in compiled.comparisons if not o.passed}
    if any(o.bad != o.nan_mismatch + o.inf_mismatch for o in compiled.comparisons if o.name in failing):
        return []  # a finite element fails too: judged as it is
    module = eager_side.program.fn if isinstance(eager_side.program.fn, torch.nn.Module) else None
    tensors = [t for _, t in eager_side.inputs.named_tensors()] + [t for _, t in module_state(module)]
    if not all(bool(t.isfinite().all()) for t in tensors if t.is_floating_point()):
        return []
    if eager_side.references is None and not eager_side.make_references():
        return []
    undefined = [
        name
        for name, actual, expected, reference in _result_pairs(
            compiled.results, eager_side.expected, eager_side.references
        )
        if name in failing and differs_only_where_undefined(actual, expected, reference, eager_side.verdict.tolerances)
    ]
    return undefined if len(undefined) == len(failing) else []


def overlapping_compiled_results(eager_side: EagerSide, compiled: CompiledSide) -> str | None:
    """What to say of failing results the compiled program wrote into memory whose elements overlap, where
    eager's do not: writes into such a result collide (a scatter given an expanded input's stride-0 layout)."""
    failing = {c.name for c in compiled.comparisons if not c.passed}
    names = [name for name in self_overlapping_outputs(compiled.results, compiled.session) if name in failing]
    if not names:
        return None
    strides = ", ".join(
        f"{name} {tuple(compiled.results.values[name].stride())} where eager's is "
        f"{tuple(eager_side.expected.values[name].stride())}"
        for name in names[:3]
        if isinstance(eager_side.expected.values.get(name), torch.Tensor)
    )
    return (
        f"the compiled result is laid out with elements sharing memory ({strides}): its writes collide, so "
        "its layout is wrong before its values are (as when a scatter keeps an expanded input's strides)"
    )


def retyped_results(eager_side: EagerSide, compiled: CompiledSide) -> bool:
    """Whether a failing tensor result has another dtype than eager's (a type promotion lost)."""
    failing = {c.name for c in compiled.comparisons if not c.passed}
    return any(
        isinstance(a := compiled.results.values.get(name), torch.Tensor)
        and isinstance(e := eager_side.expected.values.get(name), torch.Tensor)
        and a.dtype != e.dtype
        for name in failing
    )


def narrowing_visible(record: R.CaseResult) -> bool:
    """Something for narrowing to explain: a failure, or an inexact 64-bit result."""
    return any(not o.passed or (o.dtype in ("int64", "float64") and (o.max_abs > 0 or o.bad)) for o in record.outputs)


def narrowing_diagnosis(eager_side: EagerSide, compiled: CompiledSide) -> str:
    """Tell precision narrowing from misaddressing: compare compiled with eager on narrowed inputs.

    If every compiled value equals eager computed from int32/float32-rounded
    inputs (float64 outputs within float32's tolerance), the only cause is
    narrowing; elements that still differ were read or written at wrong addresses.
    """
    from harness.judge.tolerances import DEFAULT_TOLERANCES

    narrowed_inputs = eager_side.inputs.map_tensors(
        lambda t: (
            clone_exact(clone_exact(t, NARROWED_DTYPES[t.dtype]), t.dtype)
            if t.dtype in NARROWED_DTYPES
            else clone_exact(t)
        )
    )
    narrowed = (
        Session(eager_side.program.fn, narrowed_inputs, eager_side.mode, eager_side.device, eager_side.seed)
        .run()
        .tensors()
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


def passes_compiled_afresh(eager_side: EagerSide, config: RunConfig, record: R.CaseResult) -> bool:
    """Whether the program, compiled again with Inductor's and AOT autograd's caches off, passes."""
    from harness.inductor_compat import compile_caches_off

    torch.compiler.reset()
    try:
        with timed_stage("fresh_compile", record.timings, wrap=False), compile_caches_off():
            session = eager_side.compiled_session(config.backend, **compile_kwargs(config, record.compile_options))
            results = session.run()
    except Exception:  # no answer from this check: the verdict and the other diagnoses stand
        return False
    return all_pass(results, eager_side.expected, eager_side.references, eager_side.verdict)


def say_low_precision_atomics(eager_side: EagerSide, record: R.CaseResult) -> None:
    """A run that failed, or passed by the rounding of its float16/bfloat16 atomic adds, names those adds."""
    found = eager_side.low_precision_atomics
    by_rounding = [o.name for o in record.outputs if o.passed_by == R.PASSED_BY_LOW_PRECISION_ATOMICS]
    if not found or (outcome(record.facts).status != R.FAIL and not by_rounding):
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


def reproduces(eager_side: EagerSide, compiled: CompiledSide) -> tuple[bool, bool]:
    """Whether the compiled program, run once more (no recompilation), diverges again; and whether its result
    differs from the first run's (by the verdict's tolerances, as eager's two runs are compared)."""
    with launches_through(compiled.handler_factory()):
        again = compiled.session.run()
    return (
        not all_pass(again, eager_side.expected, eager_side.references, eager_side.verdict),
        not all_pass(again, compiled.results, None, eager_side.verdict),
    )


def first_launches_fail(eager_side: EagerSide, compiled: CompiledSide, config: RunConfig, record: R.CaseResult) -> bool:
    """Whether a divergence that did not come back on a second run is one of first launches: loaded afresh
    (caches warm, every kernel made anew, as a new process would load it), the program fails again on its
    first run and passes on the next. If so the run fails with symptom `first-launch`, and the compiled side
    is the program loaded afresh (every later probe run loads it afresh too)."""
    try:
        with timed_stage("first_launch", record.timings, wrap=False):
            session = loaded_afresh(eager_side, config, record)
            outcomes = []
            for _ in range(2):
                with launches_through(compiled.handler_factory()):
                    outcomes.append(
                        all_pass(session.run(), eager_side.expected, eager_side.references, eager_side.verdict)
                    )
    except Exception:  # noqa: BLE001 - no answer from this check: the run stays what the retry made it
        return False
    if outcomes != [False, True]:
        return False
    compiled.session, compiled.first_launch = session, True
    record.reproduced, record.diverged_runs = True, [1, 3]
    record.facts.first_launch = True
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
    record.facts.run_to_run = True
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


def emulated_casts_options() -> dict[str, object]:
    """Inductor's switches that keep eager's rounding at explicit casts: `emulate_precision_casts`, and where the
    torch has it, `numerics="strict"` (torch 2.14: eager's reduction order too)."""
    import torch._inductor.config as inductor_config

    options: dict[str, object] = {"emulate_precision_casts": True}
    if hasattr(inductor_config, "numerics"):
        options["numerics"] = "strict"
    return options


def emulated_casts_said(removers: list[str] | None = None) -> str:
    """What the program was compiled with to match eager, as the diagnosis and the answer say it: the passes that
    had to be turned off (their labels), and the switches."""
    switches = ", ".join(f"{k}={v!r}" for k, v in emulated_casts_options().items())
    return f"{' and '.join(removers)} turned off and {switches}" if removers else switches


class _EagerCasts(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the eager program's casts from a wider float to float16/bfloat16 (`aten._to_copy`, which `.half()`,
    `.to(dtype)` and `.type(dtype)` dispatch to), once each by dtypes."""

    def __init__(self) -> None:
        super().__init__()
        self.casts: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's signature
        from harness.inductor_compat import LOW_PRECISION, WIDER_FLOATS, LowPrecisionCast

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.ops.aten._to_copy.default and isinstance(out, torch.Tensor) and args:
            source, target = (str(t.dtype).removeprefix("torch.") for t in (args[0], out))
            cast = LowPrecisionCast("aten._to_copy", source, target, None)
            if source in WIDER_FLOATS and target in LOW_PRECISION and cast not in self.casts:
                self.casts.append(cast)
        return out


def _compiled_cold(
    eager_side: EagerSide, config: RunConfig, options: dict, disabled: frozenset[str] = frozenset()
) -> tuple[Results, list, list] | None:
    """The program compiled afresh (caches off) with `options` and the graph passes `disabled` turned off, and run
    once: its results, the explicit casts of the graphs Inductor lowered, and the passes that changed the graphs;
    None when it raises."""
    from harness.inductor_compat import (
        capture_graphs,
        compile_caches_off,
        graph_info,
        low_precision_casts,
        observing_passes,
    )

    torch.compiler.reset()
    try:
        with compile_caches_off(), capture_graphs(cold=True) as capture, observing_passes(disabled) as passes:
            results = eager_side.compiled_session(config.backend, **compile_kwargs(config, options)).run()
    except Exception:  # noqa: BLE001 - no answer from this check: the verdict and the other diagnoses stand
        return None
    finally:
        torch.compiler.reset()
    infos = [graph_info(path) for path in dict.fromkeys(capture.called)]
    casts = [cast for info in infos if info is not None for cast in low_precision_casts(info) or ()]
    return results, casts, list(passes)


# The most passes turned off beside the switch when the switch alone does not keep a cast (as the probe's pass
# search tries each of 8 or fewer alone).
PASSES_TRIED_WITH_THE_SWITCH = 8


def program_casts(eager_side: EagerSide) -> list:
    """The explicit casts to float16/bfloat16 the program makes when it runs eagerly (one more eager run): those a
    graph pass may have removed before Inductor lowered the graphs (torch 2.11's `pointless_convert` folds
    `x.half().float()` into nothing; torch 2.13 keeps a narrowing round trip)."""
    session = Session(eager_side.program.fn, eager_side.inputs, eager_side.mode, eager_side.device, eager_side.seed)
    recorder = _EagerCasts()
    try:
        with recorder:
            session.run()
    except Exception:  # noqa: BLE001 - eager ran this program before: a failure now says nothing of its casts
        return []
    return recorder.casts


def elided_casts(eager_side: EagerSide, compiled: CompiledSide, config: RunConfig, record: R.CaseResult) -> str | None:
    """A failing run whose program casts to float16/bfloat16 on purpose (`program_casts`): compiled again (caches
    off) with eager's rounding at casts emulated, does it pass? Then the compiled program kept a value in float32
    that the program rounds. The diagnosis says which casts and where they went: a program's cast whose dtypes no
    cast of the graphs Inductor lowered has was removed by a graph pass; the others are in the kernels that fuse
    them. Where the run's graphs came from the caches without facts, they are lowered once more as the run had
    them (caches off), so that the answer is the same on a cold and a warm cache."""
    if config.inject:  # (an injected fault fails whatever the casts do)
        return None
    explicit = program_casts(eager_side)
    if not explicit:
        return None
    emulate = {**record.compile_options, **emulated_casts_options()}
    with timed_stage("emulated_casts", record.timings, wrap=False):
        emulated = _compiled_cold(eager_side, config, emulate)
        if emulated is None:
            return None
        removers: list = []
        if not _passes(eager_side, emulated[0]):
            # A graph pass that ignores the switch may remove the cast before any kernel sees it (torch 2.11's
            # `pointless_convert` folds any chain of casts).
            removers = _removers(eager_side, config, emulate, emulated[2][:PASSES_TRIED_WITH_THE_SWITCH])
            if not removers:
                return None
        if compiled.casts is None and (again := _compiled_cold(eager_side, config, record.compile_options)):
            compiled.casts = again[1]
    if compiled.casts is None:
        return None
    pairs = {(cast.source, cast.target) for cast in explicit}
    lowered = [cast for cast in compiled.casts if (cast.source, cast.target) in pairs]
    removed = [
        cast for cast in explicit if not any((c.source, c.target) == (cast.source, cast.target) for c in lowered)
    ]
    if removers and not removed:
        return None  # (the passes turned off changed something else than the casts: no story of casts to tell)
    compiled.casts, compiled.casts_removed = (removed, True) if removed else (lowered, False)
    compiled.casts_removers = [p.label for p in removers]
    casts = "; ".join(f"{cast.text()}{f' in {cast.kernel}' if cast.kernel else ''}" for cast in compiled.casts[:4])
    if len(compiled.casts) > 4:
        casts += f" and {len(compiled.casts) - 4} more"
    where = " (no longer in the graphs Inductor lowered: a graph pass removed it)" if compiled.casts_removed else ""
    switches = emulated_casts_said(compiled.casts_removers)
    return (
        f"an explicit cast to lower precision elided: the compiled program keeps in float32 what the program rounds "
        f"({casts}{where}); with {switches} it matches eager"
    )


def _passes(eager_side: EagerSide, results: Results) -> bool:
    return all_pass(results, eager_side.expected, eager_side.references, eager_side.verdict)


def _passes_without(eager_side: EagerSide, config: RunConfig, options: dict, graph_passes: list) -> bool:
    again = _compiled_cold(eager_side, config, options, frozenset(p.key for p in graph_passes))
    return again is not None and _passes(eager_side, again[0])


def _removers(eager_side: EagerSide, config: RunConfig, options: dict, passes: list) -> list:
    """The passes that, turned off beside the switch, let the program match eager. First those seen erasing a
    cast to float16/bfloat16, one more at a time: with one off, another may erase the cast it left (torch 2.11's
    `pointless_convert` before a later pattern that folds casts too). Where no pass erased one (it was rewritten in
    place), each pass that changed the graphs, alone. [] when none of that makes the run pass."""
    from harness.inductor_compat import erases_low_precision_cast

    off: list = []
    while len(off) < PASSES_TRIED_WITH_THE_SWITCH:
        erasing = [p for p in passes if erases_low_precision_cast(p.erased) and p.key not in {q.key for q in off}]
        if not erasing:
            break
        off.append(erasing[0])
        again = _compiled_cold(eager_side, config, options, frozenset(p.key for p in off))
        if again is None:
            return []
        if _passes(eager_side, again[0]):
            return off
        passes = again[2]
    if off:
        return []
    return next(
        ([p] for p in passes[:PASSES_TRIED_WITH_THE_SWITCH] if _passes_without(eager_side, config, options, [p])), []
    )
