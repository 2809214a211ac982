"""Run one case: eager and compiled on identical inputs, judge, and localize a divergence.

`run_case` never raises for a problem of the case itself: whatever happens
(build error, compile crash, OOM, divergence) comes back as a `CaseResult`.
Global torch state (Dynamo/Inductor config, default dtype, grad mode, ...) is
restored after every case, so no verdict depends on the cases run before it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from harness import records as R
from harness.run import process_state
from harness.judge.colliding_writes import CollidingWrites, LowPrecisionSums, undefined_elements
from harness.judge.compare import VerdictPolicy, differs_only_where_undefined
from harness.devices import BackendMismatch, Device, get_device
from harness.inject.launch import NARROWED_DTYPES, make_handler, parse_injection
from harness.run.program import Inputs, OutputNotComparable, Session, materialize_inputs, module_state
from harness.judge.results import Results
from harness.run.dynamic import DynamicPlan
from harness.inputs import seed_for
from harness.judge.values import SizeValues, all_pass, compare_results, result_pairs as _result_pairs
from harness.layout import clone_exact, is_non_overlapping, overlaps_beyond_broadcast
from harness.registry import Case, Program
from harness.layout import dtype_name
from harness.run.config import EXTRA_FOR, RunConfig, missing_requirements, new_record
from harness.torch_import import NPU_PATCHES, npu_patches_active


class CaseFailure(Exception):
    """An exception raised inside the case, tagged with the stage it broke."""

    def __init__(self, stage: str, cause: BaseException, symptom: str | None = None):
        super().__init__(R.exception_text(cause))  # a cause whose __str__ raises is still the case's failure
        self.stage, self.cause, self.symptom = stage, cause, symptom


def run_case(
    case: Case,
    dtype: torch.dtype,
    mode: str,
    config: RunConfig,
    on_verdict: Callable[[R.CaseResult], None] | None = None,
    on_values: Callable[[list[SizeValues]], None] | None = None,
) -> R.CaseResult:
    """One run of a case, its verdict as it is: a declared known failure is applied by whoever runs it
    (`harness.run.expectations`). With `--extract`, a failure's repros are written after it was judged; `on_verdict`
    gets the judged record first (a worker sends it, so a crash while extracting cannot cost the verdict).
    `on_values` gets what each size was judged on, once the run is concluded (for the judge, `harness.judge.values`)."""
    from harness.inductor_compat import quiet_torch_logging, remember_vec_isa_checks, torch_state

    quiet_torch_logging()
    remember_vec_isa_checks()
    device = get_device(config.device)
    record = new_record(case, dtype, mode, config)
    reason = device.unavailable_reason()
    if reason is None and (missing := missing_requirements(case)):
        extras = sorted({EXTRA_FOR.get(name, "models") for name in missing})
        reason = f"needs {', '.join(missing)}: pip install -e '.[{','.join(extras)}]'"
    if reason is not None:
        record.conclude(R.SKIP, reason=reason)
        return record

    record.versions = device.versions()
    record.device_name = device.device_name()
    if not _compiler_loaded(device, case, config, record):
        return record
    started = time.perf_counter()
    changed: list[str] = []
    captured: Any = None  # the localized launch, kept for `--extract` (written once the run is over)
    with device.numerics(), torch_state.preserved(changed), process_state.preserved(changed):
        record.compile_config = {**torch_state.config_set(), NPU_PATCHES: npu_patches_active()}
        try:
            observed = _EagerSide.make(case, dtype, mode, config, device, record)
            if config.runs_dynamic(case):
                observed, compiled, sizes = _dynamic_run(observed, dtype, config, device, record)
                _settle_verdict(observed, compiled, config, record)
                _conclude_sizes(sizes, record, observed.case, config.dynamic_strict)
                judged = sizes.judged
            else:
                compiled = _compiled_run(observed, config, record)
                _settle_verdict(observed, compiled, config, record)
                judged = [(observed, compiled)]
            _say_low_precision_atomics(observed, record)
            if on_values is not None:
                on_values([_values_of(*pair) for pair in judged])
            if config.extract_dir and record.status == R.FAIL:
                captured = _captured_launch(observed, compiled, config, record)
        except CaseFailure as failure:
            if isinstance(failure.cause, NoSecondSize):
                record.conclude(R.SKIP, failure.stage, reason=f"dynamic: {failure.cause}")
            elif case.generated and isinstance(failure.cause, NoEagerReference):
                record.conclude(R.SKIP, failure.stage, reason=str(failure.cause))
            elif case.generated and failure.stage == R.Stage.EAGER:
                # No eager result, no reference: the inputs are not a test of the compiler.
                cause = failure.cause
                record.conclude(
                    R.SKIP,
                    failure.stage,
                    reason=f"eager raises on these inputs ({type(cause).__name__}: {R.exception_line(cause)})",
                )
            elif case.generated and isinstance(failure.cause, NothingCompiled):
                breaks = "; ".join(record.graph_break_reasons[:3]) or "no graph break reported"
                record.conclude(
                    R.SKIP,
                    failure.stage,
                    reason=f"Dynamo compiled nothing of this sample ({breaks}): no test of Inductor",
                )
            else:
                record.conclude(R.ERROR, failure.stage, failure.symptom or _symptom_of(failure.cause))
                record.error = R.ErrorInfo(
                    type(failure.cause).__name__, R.exception_text(failure.cause), _traceback(failure.cause)
                )
        except CASE_RAISES as exc:  # noqa: BLE001 - the harness's own bug: this run errs, the worker and the run go on
            record.conclude(R.ERROR, R.Stage.WORKER, R.Symptom.CRASH)
            record.error = R.ErrorInfo(
                type(exc).__name__,
                f"the harness failed on this case (a harness bug): {R.exception_text(exc)}",
                _traceback(exc),
            )
        finally:
            record.duration_s = round(time.perf_counter() - started, 3)
            _release(device, record)
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        record.warnings.append(f"the case changed global torch state or the process's, restored after it: {shown}")
    if captured is not None:
        if on_verdict is not None:
            on_verdict(record)
        _extract(captured, case, dtype, mode, config, record)
    return record


def _compiler_loaded(device: Device, case: Case, config: RunConfig, record: R.CaseResult) -> bool:
    """The run's compile options; and the device's compiler backend loaded before the case's state is saved
    (torch_npu's writes Inductor's config as it loads: restored to what it was before, every case after the
    first would compile without them), with which backend loaded. A backend other than the one asked for,
    or one that fails to load, makes the run an error."""
    try:
        record.compile_options = {**device.compile_options(config), **case.compile_options, **config.compile_options}
        for key, value in device.load_compiler(config, record.compile_options).items():
            setattr(record, key, value)
        return True
    except BackendMismatch as exc:
        record.conclude(R.ERROR, R.Stage.SETUP, R.Symptom.BACKEND_MISMATCH)
        record.error = R.ErrorInfo(type(exc).__name__, str(exc))
    except Exception as exc:  # noqa: BLE001 - the device's own loader failed (a missing compiler package)
        record.conclude(R.ERROR, R.Stage.SETUP, R.Symptom.CRASH)
        record.error = R.ErrorInfo(
            type(exc).__name__,
            f"loading the {device.name} compiler backend failed: {R.exception_text(exc)}",
            _traceback(exc),
        )
    return False


def _release(device: Device, record: R.CaseResult) -> None:
    """Give the case's device memory back; a device fault that surfaces only now makes the run an error."""
    try:
        device.release()
    except Exception as exc:  # noqa: BLE001 - a kernel's asynchronous fault (misaligned address, illegal access)
        # Reported by the first device call after it: whatever this run concluded was computed on a faulted device.
        record.conclude(R.ERROR, R.Stage.WORKER, R.Symptom.CRASH)
        record.error = R.ErrorInfo(
            type(exc).__name__,
            f"the device reported a fault after the run ({R.exception_text(exc)}): a kernel "
            "launched since the last synchronization (this case's, after its results were read) faulted; the "
            "worker process is replaced",
            _traceback(exc),
        )


@dataclass
class _EagerSide:
    """A case's eager side; it judges any compiled run against it."""

    case: Case
    mode: str
    device: Device
    seed: int
    program: Program
    inputs: Inputs
    expected: Results
    reference_policy: str
    verdict: VerdictPolicy
    timings: dict[str, float]
    record: R.CaseResult
    references: Results | None = None  # float64 results, made on first need
    nondeterministic: list[str] = field(default_factory=list)
    # A dynamic run's plan: which input dims every compiled session marks dynamic.
    dynamic: DynamicPlan | None = None
    # The compiled program's atomic adds in float16/bfloat16, "kernel (pointer, dtype)" (set once it compiled).
    low_precision_atomics: list[str] = field(default_factory=list)
    # Eager's second run (the judge decides nondeterminism from it too).
    again: Results | None = None

    @classmethod
    def make(
        cls,
        case: Case,
        dtype: torch.dtype,
        mode: str,
        config: RunConfig,
        device: Device,
        record: R.CaseResult,
        program: Program | None = None,
    ) -> "_EagerSide":
        """The eager side of the case, built afresh; or of `program` (the case built at another size, for a
        dynamic run's second size). Either way eager runs twice, and a result that is not repeatable is no
        reference (at the second size as at the first)."""
        seed = seed_for(case.name, dtype_name(dtype), mode)
        timings = record.timings
        at_second_size = program is not None
        with _stage(R.Stage.BUILD, timings):
            if program is None:
                torch.compiler.reset()
                program = _as_program(case.build(dtype))
                if isinstance(program.fn, torch.nn.Module):
                    program.fn.to(device.torch_device())
            inputs = materialize_inputs(program.inputs, program.kwargs, dtype, device, seed)
        with _stage(R.Stage.EAGER, timings):
            eager = Session(program.fn, inputs, mode, device, seed)
            writes = CollidingWrites()
            with writes:
                expected = eager.run()
            undefined = {}
            if writes.collisions:
                undefined, said = undefined_elements(eager.run, expected, writes.collisions, case.tolerances)
                record.warnings.append(said + (" (at the second size)" if at_second_size else ""))
        if overlapping := _self_overlapping_outputs(expected, eager, broadcast_too=False):
            why = NoEagerReference(
                f"eager wrote its result {', '.join(overlapping[:3])} into fresh memory whose elements overlap "
                "(laid out like an overlapping input): its values depend on the order of the writes, so they are "
                "no reference"
            )
            if case.generated:
                raise CaseFailure(R.Stage.EAGER, why)
            record.warnings.append(str(why))
        policy = config.reference or case.reference
        verdict = VerdictPolicy(
            case.tolerances,
            case.cosine_fallback,
            config.strict_eager or case.strict_eager,
            use_reference=policy != "none",
            undefined=undefined,
        )
        observed = cls(case, mode, device, seed, program, inputs, expected, policy, verdict, timings, record)
        # As torchbench: a program whose eager result is not repeatable cannot be judged (eager_two_runs_differ).
        with _stage(R.Stage.EAGER, timings):
            again = observed.again = eager.run()
        if not all_pass(again, expected, None, verdict):  # the quick check first: most runs repeat exactly
            comparisons = compare_results(again, expected, None, dataclasses.replace(verdict, eager_repeat=True))
            observed.nondeterministic = [c.name for c in comparisons if not c.passed]
            if observed.nondeterministic and case.generated:
                # A generated sample whose eager result is not repeatable (an op's seed outputs, atomics beyond
                # summation noise) tests nothing, like other undefined results; a hand-written case is reported
                # `nondeterministic` as it is.
                raise CaseFailure(
                    R.Stage.EAGER,
                    NoEagerReference(
                        f"two eager runs differ ({', '.join(observed.nondeterministic[:5])}): eager's result is not "
                        "repeatable on these inputs, so no compiled result can be judged against it"
                    ),
                )
            # Eager's atomic adds (attention or embedding backward on a GPU) sum in another order each run.
            if noisy := [c.name for c in comparisons if c.passed_by == R.PASSED_BY_SUMMATION_NOISE]:
                record.warnings.append(
                    f"two eager runs differ within float summation noise ({', '.join(noisy[:5])}"
                    f"{f' and {len(noisy) - 5} more' if len(noisy) > 5 else ''}): eager sums in a varying order "
                    "(atomic adds); the first run is the reference"
                )
        return observed

    @property
    def reference(self) -> str:
        return "eager" if self.references is None else "eager+fp64"

    def judge(self, actual: Results) -> list[R.OutputComparison]:
        with _stage(R.Stage.COMPARE, self.timings):
            comparisons = compare_results(actual, self.expected, self.references, self.verdict)
        wanted = self.reference_policy == "fp64" or (
            self.reference_policy == "auto" and any(self.verdict.wants_reference(c) for c in comparisons)
        )
        if wanted and self.references is None and self._make_references():
            with _stage(R.Stage.COMPARE, self.timings):
                comparisons = compare_results(actual, self.expected, self.references, self.verdict)
        if self._wants_atomic_baseline(comparisons):
            with _stage(R.Stage.REFERENCE, self.timings):
                self.verdict = dataclasses.replace(self.verdict, atomic_baseline=self._atomic_baseline())
            with _stage(R.Stage.COMPARE, self.timings):
                comparisons = compare_results(actual, self.expected, self.references, self.verdict)
        return comparisons

    def _wants_atomic_baseline(self, comparisons: list[R.OutputComparison]) -> bool:
        """Whether a float result failed rule 3 in a program that adds atomically in float16/bfloat16, and the
        baseline for those adds' rounding is not made yet."""
        return (
            bool(self.low_precision_atomics)
            and not self.verdict.atomic_baseline
            and not self.verdict.strict_eager
            and any(not c.passed and c.rule == "rmse_vs_fp64" for c in comparisons)
        )

    def _atomic_baseline(self) -> dict[str, torch.Tensor]:
        """Eager once more, each float16/bfloat16 scatter sum made one add at a time in its dtype
        (`LowPrecisionSums`); empty when no such sum ran in eager (its ops are not those read there)."""
        sums = LowPrecisionSums()
        try:
            with sums:
                results = Session(self.program.fn, self.inputs, self.mode, self.device, self.seed).run()
        except Exception as exc:  # noqa: BLE001 - no baseline: the verdict stands on rule 3 as it is
            self.record.warnings.append(
                f"eager with its low-precision sums made one add at a time failed "
                f"({type(exc).__name__}: {R.exception_line(exc)})"
            )
            return {}
        return results.tensors() if sums.emulated else {}

    def _make_references(self) -> bool:
        """The float64 results, made once. A float64 kernel may refuse a layout the float16 one accepts (cuDNN's
        batch norm wants a contiguous weight): the reference is then made again on contiguous copies of the
        same values before the verdict falls back to tolerance alone."""
        started = time.perf_counter()
        attempts = [self.inputs]
        if any(not t.is_contiguous() for _, t in self.inputs.named_tensors()):
            attempts.append(self.inputs.map_tensors(lambda t: t.contiguous()))
        failures: list[Exception] = []
        try:
            for inputs in attempts:
                try:
                    self.references = self._float64_run(inputs)
                except Exception as exc:  # noqa: BLE001 - retried on contiguous inputs, then tolerance decides
                    failures.append(exc)
                    continue
                if failures:
                    first = failures[0]
                    self.record.warnings.append(
                        f"the float64 reference failed on the inputs' own layouts ({type(first).__name__}: "
                        f"{R.exception_line(first)}); it was made on contiguous copies of the same values"
                    )
                return True
            # An op without a float64 kernel, a dtype the program fixes: tolerance decides.
            failure = failures[-1]
            self.references = Results()
            self.record.warnings.append(
                f"the float64 reference failed ({type(failure).__name__}: "
                f"{R.exception_line(failure)}); float outputs were judged by tolerance alone"
            )
            return False
        finally:
            self.timings["reference"] = round(self.timings.get("reference", 0.0) + time.perf_counter() - started, 3)

    def _float64_run(self, inputs: Inputs) -> Results:
        """The program in float64 on the case's device, or, for a device without float64 (the NPU), on its
        `float64_device` from copies of the inputs (and of a module) made there."""
        if self.device.float64_device is None:
            return Session(self.program.fn, inputs, self.mode, self.device, self.seed, float64=True).run()
        host = get_device(self.device.float64_device)
        fn = self.program.fn
        if isinstance(fn, torch.nn.Module):
            fn = copy.deepcopy(fn).to(host.torch_device())
        references = Session(fn, inputs, self.mode, host, self.seed, float64=True).run()
        self.record.reference_device = host.name
        return references

    def compiler(self, backend: Any, **compile_kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        # A dynamic run marks its dims on every run's inputs: `dynamic=False` would tell Dynamo to specialise.
        dynamic = self.case.dynamic if self.dynamic is None else (True if self.case.dynamic else None)
        return lambda fn: torch.compile(fn, backend=backend, dynamic=dynamic, **compile_kwargs)

    def compiled_session(self, backend: Any, **compile_kwargs: Any) -> Session:
        """The program on the same inputs, compiled with `backend` (compiled on its first run)."""
        return Session(
            self.program.fn,
            self.inputs,
            self.mode,
            self.device,
            self.seed,
            wrap=self.compiler(backend, **compile_kwargs),
            prepare=self.dynamic.mark if self.dynamic is not None else None,
        )


@dataclass
class _CompiledSide:
    """The compiled side: its session (run again by localization without recompiling) and first results."""

    session: Session
    results: Results
    comparisons: list[R.OutputComparison]
    handler_factory: Callable[[], Any]
    # The program compiled again as it was first (when a probe must lower it afresh): the session its graphs
    # are compiled and lowered through on a first run, and the session to run as this one. For a dynamic
    # run's second size these differ: compiled at the first size, run at the second.
    compile_again: Callable[[], tuple[Session, Session]]
    # A probe run saw a graph input change with no launch writing it: later probe runs copy every input.
    copy_graph_inputs: bool = False
    # Graphs the compile took from Inductor's or AOT autograd's cache.
    cache_hits: int = 0
    # It diverges on its kernels' first launches only: every probe run loads it afresh.
    first_launch: bool = False


def _compiled_run(observed: _EagerSide, config: RunConfig, record: R.CaseResult) -> _CompiledSide:
    """The compiled run, through the injection when asked for; counts graphs; judges."""
    from harness.inductor_compat import (
        capture_graphs,
        compile_cache_hits,
        dynamo_graph_counts,
        graph_break_reasons,
        install_lowering_hook,
        load_kernels_afresh,
        low_precision_atomics,
        program_accumulates,
        reset_dynamo_counters,
    )

    def handler_factory() -> Any:
        return make_handler(config.inject) if config.inject else None

    handler = handler_factory()
    kwargs = _compile_kwargs(config, record.compile_options)
    if config.inject and parse_injection(config.inject)[0].first_launches:
        # Its kernels' launches here must be their first, whatever this process compiled before.
        load_kernels_afresh()
    # Lowering facts are kept beside Inductor's cache entries, so a later --bisect on a warm cache finds them.
    install_lowering_hook()
    reset_dynamo_counters()
    with _stage(R.Stage.COMPILE, observed.timings), _launches_through(handler), capture_graphs() as capture:
        session = observed.compiled_session(config.backend, **kwargs)
        results = session.run()
    record.graphs = dynamo_graph_counts()
    record.graph_break_reasons = graph_break_reasons()
    # Summation noise is allowed only where the compiled program sums (no compiled graph: allowed).
    observed.verdict = dataclasses.replace(observed.verdict, accumulated=program_accumulates(capture.called))
    observed.low_precision_atomics = low_precision_atomics(capture.called)
    if handler is not None:
        record.injection_stats = copy.deepcopy(handler.stats)
        # An injection that changed nothing makes the verdict say nothing of it: a pass would read as evidence.
        if (missed := getattr(handler, "missed", lambda: None)()) is not None:
            raise CaseFailure(
                R.Stage.COMPILE, InjectionMissed(f"{config.inject}: {missed}"), R.Symptom.INJECTION_MISSED
            )

    def compile_again() -> tuple[Session, Session]:
        again = observed.compiled_session(config.backend, **kwargs)
        return again, again

    return _CompiledSide(
        session, results, observed.judge(results), handler_factory, compile_again, cache_hits=compile_cache_hits()
    )


class NothingCompiled(Exception):
    pass


class NoSecondSize(Exception):
    """A dynamic run cannot make the case's second size: no dim varies, or eager rejects it."""


@dataclass
class _Sizes:
    """A dynamic run's two sizes: each one's comparisons, and whether the second compiled again."""

    first: list[R.OutputComparison]
    second: list[R.OutputComparison]
    recompiled: bool
    recompile_reasons: list[str] = field(default_factory=list)  # Dynamo's: the guards that failed
    # Each size's eager and compiled sides, in order: what the judge gets.
    judged: list[tuple["_EagerSide", "_CompiledSide"]] = field(default_factory=list)


def _dynamic_run(
    observed: _EagerSide, dtype: torch.dtype, config: RunConfig, device: Device, record: R.CaseResult
) -> tuple[_EagerSide, _CompiledSide, _Sizes]:
    """Eager at the second size first (the first plan it accepts: which dims vary), then one compile at the
    declared size with those dims marked, and the same compiled program run at the second size. The size
    whose results fail first (or the first) is the one concluded and localized."""
    from harness.run.dynamic import BadDynamicDims, check_second_size, plans_for, shapes
    from harness.inductor_compat import compile_ids, dynamo_graph_counts, recompile_reasons

    program = observed.program
    try:
        plans = plans_for(program.inputs, program.kwargs, observed.case.dynamic_dims)
    except BadDynamicDims as exc:
        raise CaseFailure(R.Stage.BUILD, exc) from None
    if isinstance(plans, str):
        raise CaseFailure(R.Stage.BUILD, NoSecondSize(plans))
    second, rejected = None, None
    for plan in plans:
        args, kwargs = plan.second(program.inputs, program.kwargs)
        try:
            check_second_size((program.inputs, program.kwargs), (args, kwargs), observed.case.dynamic_dims)
        except BadDynamicDims as exc:
            raise CaseFailure(R.Stage.BUILD, exc) from None
        try:
            second = _EagerSide.make(
                observed.case,
                dtype,
                observed.mode,
                config,
                device,
                record,
                program=dataclasses.replace(program, inputs=args, kwargs=kwargs),
            )
            break
        except CaseFailure as failure:
            rejected = failure.cause
    if second is None:
        raise CaseFailure(
            R.Stage.EAGER,
            NoSecondSize(
                f"eager rejects the second size ({type(rejected).__name__}: {R.exception_line(rejected)}), varying the "
                "chosen dims alone or with every dim of their sizes; declare the case's dynamic_dims"
            ),
        ) from None
    observed.dynamic = second.dynamic = plan
    compiled = _compiled_run(observed, config, record)
    graphs, compiled_before = dynamo_graph_counts()["graphs"], compile_ids()
    # The compiled run's facts (what the program sums), with the second size's own undefined elements.
    second.verdict = dataclasses.replace(observed.verdict, undefined=second.verdict.undefined, atomic_baseline={})
    second.low_precision_atomics = observed.low_precision_atomics
    handler_factory = compiled.handler_factory
    with _stage("second_size", record.timings, wrap=False), _launches_through(handler_factory()):
        session = compiled.session.at(second.inputs)
        results = session.run()

    def compile_again_at_the_second_size() -> tuple[Session, Session]:
        at_first, _ = compiled.compile_again()
        return at_first, at_first.at(second.inputs)

    second_compiled = _CompiledSide(
        session,
        results,
        second.judge(results),
        handler_factory,
        compile_again_at_the_second_size,
        cache_hits=compiled.cache_hits,
    )
    record.dynamic_sizes = [
        shapes(observed.inputs.args, observed.inputs.kwargs),
        shapes(second.inputs.args, second.inputs.kwargs),
    ]
    recompiled = dynamo_graph_counts()["graphs"] > graphs
    sizes = _Sizes(
        compiled.comparisons,
        second_compiled.comparisons,
        recompiled=recompiled,
        recompile_reasons=recompile_reasons(compiled_before) if recompiled else [],
        judged=[(observed, compiled), (second, second_compiled)],
    )
    # The second size is concluded when only it fails, or when eager's result is not repeatable there (no verdict).
    if second.nondeterministic or (
        all(c.passed for c in compiled.comparisons) and not all(c.passed for c in second_compiled.comparisons)
    ):
        return second, second_compiled, sizes
    return observed, compiled, sizes


def _conclude_sizes(sizes: _Sizes, record: R.CaseResult, case: Case, strict: bool) -> None:
    """Both sizes in the record: the second's results named `<name>@size2`, which sizes failed, and a
    recompilation with the guard that failed. Where the values pass, a recompilation is a pass with a warning
    (`strict`: a failure of its own, the second size ran no dynamic kernel); for a generated sample, a skip (no
    test of dynamic kernels, as a sample Dynamo compiles nothing of)."""
    record.outputs = sizes.first + [dataclasses.replace(c, name=f"{c.name}@size2") for c in sizes.second]
    record.failed_sizes = [
        n for n, comparisons in ((1, sizes.first), (2, sizes.second)) if not all(c.passed for c in comparisons)
    ]
    record.recompiled = sizes.recompiled
    if not sizes.recompiled:
        return
    record.recompile_reasons = sizes.recompile_reasons
    guards = "; ".join(sizes.recompile_reasons[:2]) or "Dynamo reported none"
    said = (
        f"the second size compiled again (guard failed: {guards}): its results come from a graph of that "
        "size, not from the dynamic one"
    )
    if record.status == R.PASS and case.generated:
        record.conclude(R.SKIP, R.Stage.COMPILE, reason=f"dynamic: {said}")
    elif record.status == R.PASS and not strict:
        record.warnings.append(f"{said}; its values pass (--dynamic strict fails a recompilation)")
    else:
        if record.status == R.PASS:
            record.conclude(R.FAIL, R.Stage.COMPILE, R.Symptom.RECOMPILED)
        record.diagnosis = f"{record.diagnosis}; {said}" if record.diagnosis else said


def _values_of(observed: _EagerSide, compiled: _CompiledSide) -> SizeValues:
    """What one size's verdict was computed from, as the run ends (the float64 reference made on need)."""
    verdict = observed.verdict
    return SizeValues(
        compiled.results,
        observed.expected,
        observed.references,
        observed.again,
        undefined=dict(verdict.undefined),
        atomic_baseline=dict(verdict.atomic_baseline),
        accumulated=verdict.accumulated,
    )


def _say_low_precision_atomics(observed: _EagerSide, record: R.CaseResult) -> None:
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


class InjectionMissed(Exception):
    pass


class NoEagerReference(Exception):
    pass


def _self_overlapping_outputs(results: Results, session: Session, broadcast_too: bool = True) -> list[str]:
    """Tensor results whose elements share addresses in memory of their own (not a view of an input,
    a parameter or a buffer). Without `broadcast_too`, only those that overlap beyond stride-0 dims: a
    broadcast (the gradient of a sum is an expanded view) has well-defined values."""
    owned = list(results.state.values()) + [tensor for _, tensor in module_state(session.module)]
    inputs = {t.untyped_storage().data_ptr() for t in owned if t.layout == torch.strided}
    overlaps = (lambda t: not is_non_overlapping(t)) if broadcast_too else overlaps_beyond_broadcast
    return [
        name
        for name, value in results.values.items()
        if isinstance(value, torch.Tensor)
        and value.numel() > 1
        and value.layout == torch.strided
        and overlaps(value)
        and value.untyped_storage().data_ptr() not in inputs
    ]


class NothingCompared(Exception):
    pass


def _overlapping_compiled_results(observed: _EagerSide, compiled: _CompiledSide) -> str | None:
    """What to say of failing results the compiled program wrote into memory whose elements overlap, where
    eager's do not: writes into such a result collide (a scatter given an expanded input's stride-0 layout)."""
    failing = {c.name for c in compiled.comparisons if not c.passed}
    names = [name for name in _self_overlapping_outputs(compiled.results, compiled.session) if name in failing]
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


def _retyped_results(observed: _EagerSide, compiled: _CompiledSide) -> bool:
    """Whether a failing tensor result has another dtype than eager's (a type promotion lost)."""
    failing = {c.name for c in compiled.comparisons if not c.passed}
    return any(
        isinstance(a := compiled.results.values.get(name), torch.Tensor)
        and isinstance(e := observed.expected.values.get(name), torch.Tensor)
        and a.dtype != e.dtype
        for name in failing
    )


def _undefined_results(observed: _EagerSide, compiled: _CompiledSide) -> list[str]:
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
    if observed.references is None and not observed._make_references():
        return []
    undefined = [
        name
        for name, actual, expected, reference in _result_pairs(compiled.results, observed.expected, observed.references)
        if name in failing and differs_only_where_undefined(actual, expected, reference, observed.verdict.tolerances)
    ]
    return undefined if len(undefined) == len(failing) else []


def _settle_verdict(observed: _EagerSide, compiled: _CompiledSide, config: RunConfig, record: R.CaseResult) -> None:
    """Status, stage, symptom, and the follow-up analyses a divergence calls for."""
    record.outputs = compiled.comparisons
    if not any(not (o.rule == "equal" and o.dtype == "NoneType") for o in record.outputs):
        raise CaseFailure(
            R.Stage.COMPARE,
            NothingCompared(
                "nothing was compared: the program returned no tensor and no value, changed no input or buffer, "
                "and has no gradient"
            ),
            R.Symptom.NOTHING_COMPARED,
        )
    if record.graphs and record.graphs["graphs"] == 0 and observed.case.compiles:
        raise CaseFailure(
            R.Stage.COMPILE,
            NothingCompiled(
                "Dynamo produced no graph: the compiled run ran eagerly (every frame fell back, e.g. through "
                "suppress_errors, or the case compiles nothing; declare compiles=False if that is intended)"
            ),
            R.Symptom.NOTHING_COMPILED,
        )
    diverged = not all(o.passed for o in record.outputs)
    if diverged and (undefined := _undefined_results(observed, compiled)):
        why = NoEagerReference(
            f"{', '.join(undefined[:3])} {'is' if len(undefined) == 1 else 'are'} undefined where eager and compiled "
            "differ: each side has NaN or inf there, and so has a float64 run from the same finite inputs (NaN, "
            "or an inf eager does not match: a gradient at a singular point), so which of NaN, inf or -inf each "
            "side rounds to says nothing of the compiled code"
        )
        if observed.case.generated:
            raise CaseFailure(R.Stage.EAGER, why)
        record.warnings.append(str(why))
    if diverged:
        record.conclude(R.FAIL, R.Stage.COMPARE, R.Symptom.DIVERGENCE)
        if overlapping := _overlapping_compiled_results(observed, compiled):
            record.diagnosis = overlapping
    else:
        record.conclude(R.PASS, record.stage, record.symptom)
    if observed.nondeterministic:
        record.conclude(R.NONDETERMINISTIC, R.Stage.EAGER, R.Symptom.NONDETERMINISM)
        record.diagnosis = f"two eager runs differ ({', '.join(observed.nondeterministic[:5])}): no verdict on compiled"
    elif diverged and not config.bisect:
        # A divergence is retried once (no recompilation): one that does not come back is nondeterminism, or
        # a bug of first launches. (With --bisect, localization's first run, which changes no value, is that
        # retry.)
        reproduced, runs_differ = _reproduces(observed, compiled)
        if reproduced or not _first_launches_fail(observed, compiled, config, record):
            _settle_reproduction(record, reproduced, runs_differ)
    if config.bisect and (record.status == R.FAIL or (config.bisect == "always" and record.status == R.PASS)):
        with _stage("localize", record.timings, wrap=False):
            found = _localize(observed, compiled, config, record)
            if found is None and _first_launches_fail(observed, compiled, config, record):
                found = _localize(observed, compiled, config, record) or R.Localization(
                    answer=R.Answer.UNLOCALIZED,
                    diverged=True,
                    reason="the probe's runs, each on first launches "
                    "of the kernels loaded afresh, did not diverge again",
                )
        if record.status == R.FAIL and record.symptom != R.Symptom.FIRST_LAUNCH:
            _settle_reproduction(record, found is not None)
        record.first_divergent_kernel = found
        if observed.case.culprit and record.status == R.FAIL:
            record.culprit_found = record.first_divergent_kernel.names(observed.case.culprit)
    # (Not with an injected fault: it fails afresh too, by construction.)
    if (
        config.fresh_compile
        and record.status == R.FAIL
        and compiled.cache_hits
        and not config.inject
        and _passes_compiled_afresh(observed, config, record)
    ):
        hits = f"{compiled.cache_hits} hit{'' if compiled.cache_hits == 1 else 's'}"
        cached = (
            f"compiled again with the compile caches off, it passes: the failing program came from the "
            f"compile caches ({hits}), from an entry made for another program (a cache key that misses "
            "something the generated code depends on)"
        )
        record.diagnosis = f"{record.diagnosis}; {cached}" if record.diagnosis else cached
    record.reference = observed.reference
    stats = record.injection_stats or R.InjectionStats()
    narrows = config.inject is not None and parse_injection(config.inject)[0].narrows
    if narrows and stats.converted_args and _narrowing_visible(record):
        with _stage(R.Stage.REFERENCE, record.timings):
            record.diagnosis = narrowing_diagnosis(observed, compiled)


def _passes_compiled_afresh(observed: _EagerSide, config: RunConfig, record: R.CaseResult) -> bool:
    """Whether the program, compiled again with Inductor's and AOT autograd's caches off, passes."""
    from harness.inductor_compat import compile_caches_off

    torch.compiler.reset()
    try:
        with _stage("fresh_compile", record.timings, wrap=False), compile_caches_off():
            session = observed.compiled_session(config.backend, **_compile_kwargs(config, record.compile_options))
            results = session.run()
    except Exception:  # no answer from this check: the verdict and the other diagnoses stand
        return False
    return all_pass(results, observed.expected, observed.references, observed.verdict)


def _narrowing_visible(record: R.CaseResult) -> bool:
    """Something for narrowing to explain: a failure, or an inexact 64-bit result."""
    return any(not o.passed or (o.dtype in ("int64", "float64") and (o.max_abs > 0 or o.bad)) for o in record.outputs)


def _reproduces(observed: _EagerSide, compiled: _CompiledSide) -> tuple[bool, bool]:
    """Whether the compiled program, run once more (no recompilation), diverges again; and whether its result
    differs from the first run's (by the verdict's tolerances, as eager's two runs are compared)."""
    with _launches_through(compiled.handler_factory()):
        again = compiled.session.run()
    return (
        not all_pass(again, observed.expected, observed.references, observed.verdict),
        not all_pass(again, compiled.results, None, observed.verdict),
    )


def _first_launches_fail(
    observed: _EagerSide, compiled: _CompiledSide, config: RunConfig, record: R.CaseResult
) -> bool:
    """Whether a divergence that did not come back on a second run is one of first launches: loaded afresh
    (caches warm, every kernel made anew, as a new process would load it), the program fails again on its
    first run and passes on the next. If so the run fails with symptom `first-launch`, and the compiled side
    is the program loaded afresh (every later probe run loads it afresh too)."""
    try:
        with _stage("first_launch", record.timings, wrap=False):
            session = _loaded_afresh(observed, config, record)
            outcomes = []
            for _ in range(2):
                with _launches_through(compiled.handler_factory()):
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


def _loaded_afresh(observed: _EagerSide, config: RunConfig, record: R.CaseResult) -> Session:
    """The compiled session again, its kernels loaded as a new process would load them (from warm caches)."""
    from harness.inductor_compat import load_kernels_afresh

    load_kernels_afresh()
    return observed.compiled_session(config.backend, **_compile_kwargs(config, record.compile_options))


def _settle_reproduction(record: R.CaseResult, reproduced: bool, runs_differ: bool | None = None) -> None:
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


def _localize(
    observed: _EagerSide, compiled: _CompiledSide, config: RunConfig, record: R.CaseResult
) -> R.Localization | None:
    """Localization's answer; None when a failing run's first probe run (its retry) passed."""
    from harness.probe import LocalizationHooks, NotReproduced, localize

    def passes(results: Results) -> bool:
        if all_pass(results, observed.expected, observed.references, observed.verdict):
            return True
        if observed.references is None and observed.reference_policy != "none" and observed._make_references():
            return all_pass(results, observed.expected, observed.references, observed.verdict)
        return False

    # A failing run's candidate matters only if it moves a result that failed. One that moves only results
    # that passed explains nothing of the failure, and its eager twin may be what is wrong there (a post-grad
    # graph that already differs from the program: docs/localization.md, "false blame").
    failed = {c.name for c in compiled.comparisons if not c.passed} or None

    def moved(results: Results) -> bool:
        return not all_pass(results, compiled.results, None, observed.verdict, only=failed)

    def with_passes(disabled: frozenset) -> tuple[bool, list]:
        return _compiled_with_passes(observed, compiled, config, record, disabled, passes)

    program = LocalizationHooks(
        rerun=lambda probe: _probe_run(observed, compiled, config, record, probe),
        passes=passes,
        moved=moved,
        diverges_under=lambda backend: diverges_under(observed, backend),
        injection=compiled.handler_factory,
        first_launches=compiled.first_launch,
        wrong_layout_or_dtype=(
            _overlapping_compiled_results(observed, compiled) is not None or _retyped_results(observed, compiled)
        ),
        graph_passes=lambda: with_passes(frozenset())[1],
        passes_without=lambda keys: with_passes(keys)[0],
        graphs_pass_eagerly=lambda: _graphs_pass_eagerly(compiled, passes),
    )
    failing = record.status == R.FAIL
    try:
        found = localize(program, observed.verdict, failing)
        found.check(record.status)
        return _as_the_launcher_called_it(found, config)
    except NotReproduced:
        return None
    except Exception as exc:  # the probe's own failure must never cost the run its verdict
        if failing and not compiled.first_launch and not _reproduces(observed, compiled):
            return None
        answer = R.Answer.UNLOCALIZED if failing else R.Answer.NONE
        return R.Localization(
            answer=answer,
            diverged=failing,
            reason=f"the probe itself failed ({type(exc).__name__}: {R.exception_line(exc)})",
            problems=[_traceback(exc)[-2000:]],
        )


def _captured_launch(observed: _EagerSide, compiled: _CompiledSide, config: RunConfig, record: R.CaseResult) -> Any:
    """The kernel a failing run's localization named (a wrong kernel, or where a drift starts), captured on one
    more probe run for `--extract` (None, with the reason noted on the record, when there is none)."""
    from harness.probe import KernelProbe

    found = record.first_divergent_kernel
    if found is None or found.answer not in (R.Answer.KERNEL, R.Answer.DRIFT) or found.launch_index is None:
        answer = "no localization" if found is None else f"the answer is {found.answer}, not a kernel"
        if found is not None and found.fallback_index is not None:
            answer = f"the answer is fallback call aten:{found.fallback_index}; fallback calls are not extracted yet"
        record.extracted = R.Reproduction.NOT_EXTRACTED
        record.warnings.append(f"--extract: nothing extracted ({answer}); extraction starts from a kernel")
        return None
    kept: list[Any] = []

    def capture(launch: Any, call: Any, label: str) -> None:
        from harness.extraction.capture import capture_launch

        kept.append(capture_launch(launch, call, label, found.buffer))

    probe = KernelProbe(
        observed.verdict,
        inner=compiled.handler_factory(),
        substitute=frozenset(),
        describe=frozenset({found.launch_index}),
        capture=capture,
        capture_at=found.launch_index,
        first_launches=compiled.first_launch,
    )
    with _stage("extract", record.timings, wrap=False):
        try:
            _probe_run(observed, compiled, config, record, probe)
        except Exception as exc:  # noqa: BLE001 - extraction must never cost the run its verdict
            record.extracted = R.Reproduction.DOES_NOT_REPRODUCE
            record.warnings.append(
                f"--extract: capturing launch {found.launch_index} failed ({type(exc).__name__}: "
                f"{R.exception_line(exc)})"
            )
            return None
    if not kept:
        record.extracted = R.Reproduction.DOES_NOT_REPRODUCE
        record.warnings.append(f"--extract: launch {found.launch_index} was not seen again on the probe run")
    return kept[-1] if kept else None


def _extract(captured: Any, case: Case, dtype: torch.dtype, mode: str, config: RunConfig, record: R.CaseResult) -> None:
    """Write and verify the repros of a captured launch (after the run, with its state restored)."""
    from harness.extraction.extract import Parent, extract

    started = time.perf_counter()
    try:
        record.extraction = extract(captured, Parent(case, dtype, mode, config, record, run_case))
        record.extracted = record.extraction.extracted
    except Exception as exc:  # noqa: BLE001 - extraction must never cost the run its verdict
        record.extracted = R.Reproduction.DOES_NOT_REPRODUCE
        record.warnings.append(f"--extract failed ({type(exc).__name__}: {R.exception_line(exc)})")
    record.timings["extract"] = round(record.timings.get("extract", 0.0) + time.perf_counter() - started, 3)


def _as_the_launcher_called_it(found: R.Localization, config: RunConfig) -> R.Localization:
    """Under an emulation of the NPU launcher, a kernel "wrong" on eager inputs ran as the emulated launcher
    handed it its arguments (64-bit ones narrowed at the launch boundary): the answer says the launcher is what
    diverges, not the kernel's code."""
    from harness.inject.launch import parse_injection

    if not config.inject or found.answer != R.Answer.KERNEL or not (found.isolated or "").startswith("kernel is"):
        return found
    injection, _ = parse_injection(config.inject)
    if injection.narrows:
        # One statement, short enough for a console line: the evidence is in the record's own fields.
        found.isolated = (
            f"kernel as the emulated launcher ({injection.name}) calls it, its 64-bit arguments "
            "narrowed at the launch boundary, is wrong: the launcher is what diverges, not the kernel's "
            "code"
        )
    return found


def _probe_run(
    observed: _EagerSide, compiled: _CompiledSide, config: RunConfig, record: R.CaseResult, probe: Any
) -> Results:
    """One more run of the compiled program with `probe` installed."""
    probe.copy_inputs = probe.copy_inputs or compiled.copy_graph_inputs
    results = _probe_run_once(observed, compiled, config, record, probe)
    if probe.unannounced_writes and not probe.copy_inputs:
        compiled.copy_graph_inputs = True
        graphs = ", ".join(probe.unannounced_writes)
        probe.restart(copy_inputs=True)
        probe.problems.append(
            f"{graphs}: a graph input changed with no kernel launch writing it (an ATen call in "
            "the wrapper): probed again with every graph input copied up front"
        )
        results = _probe_run_once(observed, compiled, config, record, probe)
    return results


def _probe_run_once(
    observed: _EagerSide, compiled: _CompiledSide, config: RunConfig, record: R.CaseResult, probe: Any
) -> Results:
    from harness.inductor_compat import adopt_facts, capture_graphs, intercept_launches

    if compiled.first_launch:  # the probe judges the kernels' first launches
        compiled.session = _loaded_afresh(observed, config, record)
    with capture_graphs(probe.observe_graph) as capture, intercept_launches(probe.on_launch):
        results = compiled.session.run()
    if capture.missing:
        # A cache entry made without lowering facts: lower every graph again, caches off, probe that,
        # and leave the facts beside the cached entries for the next run.
        torch.compiler.reset()
        lowering, compiled.session = compiled.compile_again()
        probe.restart()
        # The probe judges first launches: they are the probed run's (unless it is lowered at another size).
        if compiled.first_launch and lowering is compiled.session:
            with (
                _rewriting_for(probe.inner),
                capture_graphs(probe.observe_graph, cold=True) as lowered,
                intercept_launches(probe.on_launch),
            ):
                results = compiled.session.run()
        else:
            # Loaded anew, the kernels launch for the first time: in a run of their own, not in the probed
            # run, which stands for a second run of the program (a bug of first launches must not come back
            # there, as it would not in a plain retry).
            # (A dynamic run's second size is lowered at the first, where it was compiled.)
            with (
                _rewriting_for(probe.inner),
                capture_graphs(cold=True) as lowered,
                _launches_through(compiled.handler_factory()),
            ):
                lowering.run()
            with capture_graphs(probe.observe_graph), intercept_launches(probe.on_launch):
                results = compiled.session.run()
        adopted = adopt_facts(capture, lowered)
        probe.problems.append(
            f"{len(capture.missing)} compiled graph(s) came from a cache entry without lowering "
            f"facts: lowered again with caches off (facts kept for {adopted} of them)"
        )
    return results


def _graphs_pass_eagerly(compiled: _CompiledSide, passes: Callable[[Results], bool]) -> bool | None:
    """Whether the compiled program passes with each graph's post-grad FX graph run eagerly in place of its
    wrapper's `call` (no kernel, no glue); None when a graph has no lowering facts or the run raises."""
    from harness.inductor_compat import capture_graphs

    def eagerly(info: Any, args: list, call: Callable[[list], Any]) -> Any:
        outputs = info.gm(*args)
        args.clear()  # as the wrapper's call does: the inputs it was handed are its to free
        return outputs

    try:
        with capture_graphs(eagerly) as capture:
            results = compiled.session.run()
    except Exception:  # noqa: BLE001 - no answer from this check: the stage answer keeps both places
        return None
    return None if capture.missing else passes(results)


def diverges_under(observed: _EagerSide, backend: str) -> bool:
    """Whether the program compiled with a backend before Inductor's (CompilerBisector's `eager`, `aot_eager`,
    `aot_eager_decomp_partition`) diverges from eager: judged against the same eager results, without the
    injection (injections act on generated kernels). A backend that raises where eager did not diverges too."""
    from harness.inductor_compat import room_to_recompile

    try:
        with room_to_recompile():
            results = observed.compiled_session(backend).run()
    except Exception:  # noqa: BLE001 - eager ran this program: the stage's own failure is its divergence
        return True
    return not all(c.passed for c in observed.judge(results))


def _compiled_with_passes(
    observed: _EagerSide,
    compiled: _CompiledSide,
    config: RunConfig,
    record: R.CaseResult,
    disabled: frozenset,
    passes: Callable[[Results], bool],
) -> tuple[bool, list]:
    """The program compiled afresh (caches off: a cached graph runs no pass) with the Inductor graph passes of
    these keys turned off, run through the injection: whether it passes, and the passes that changed its graphs."""
    from harness.inductor_compat import (
        capture_graphs,
        compile_caches_off,
        distinct_inductor,
        graph_info,
        left_in_lowered,
        observing_passes,
        room_to_recompile,
    )

    if config.backend != "inductor":
        return False, []
    backend = distinct_inductor(
        _compile_kwargs(config, record.compile_options).get("options", {}), observed.case.dynamic
    )
    with observing_passes(disabled) as changed, capture_graphs() as capture:
        try:
            with compile_caches_off(), room_to_recompile(), _launches_through(compiled.handler_factory()):
                results = observed.compiled_session(backend).run()
        except Exception:  # noqa: BLE001 - a pass some other pass relies on, turned off: this set does not pass
            return False, list(changed)
    infos = [info for info in map(graph_info, capture.called) if info is not None]
    lowered = frozenset(node.name for info in infos for node in info.gm.graph.nodes)
    return passes(results), left_in_lowered(list(changed), lowered)


def narrowing_diagnosis(observed: _EagerSide, compiled: _CompiledSide) -> str:
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


def _as_program(built: Program | tuple) -> Program:
    if isinstance(built, Program):
        return built
    fn, inputs = built
    return Program(fn, inputs)


def _compile_kwargs(config: RunConfig, options: dict[str, Any]) -> dict[str, Any]:
    # torch.compile accepts `options` for Inductor only, and never together with `mode`.
    if config.backend != "inductor":
        return {"mode": config.compile_mode} if config.compile_mode else {}
    if config.compile_mode:
        from harness.inductor_compat import mode_options

        options = {**mode_options(config.compile_mode), **options}
    return {"options": options} if options else {}


@contextlib.contextmanager
def _launches_through(handler: Callable[[Any], Any] | None) -> Iterator[None]:
    """Route the compiled run's launches through the injection, when there is one."""
    from harness.inductor_compat import intercept_launches

    with _rewriting_for(handler), intercept_launches(handler) if handler is not None else contextlib.nullcontext():
        yield


def _rewriting_for(handler: Any) -> contextlib.AbstractContextManager:
    """Rewritten-kernel emulations (reduction-partial, ...) compile their variants as wrapper modules load."""
    from harness.inductor_compat.kernel_variants import rewriting

    return rewriting(getattr(handler, "rewriters", ()))


@contextlib.contextmanager
def _stage(stage: str, timings: dict[str, float], wrap: bool = True) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    except CaseFailure:
        raise
    except CASE_RAISES as exc:  # Ctrl-C or sys.exit() raised by case code is the case's failure, not the worker's
        if not wrap:
            raise
        raise CaseFailure(stage, exc) from exc
    finally:
        timings[str(stage)] = round(timings.get(str(stage), 0.0) + time.perf_counter() - started, 3)


# What case code may raise and the run records as the case's failure (the worker goes on).
CASE_RAISES = (Exception, KeyboardInterrupt, SystemExit)


def _symptom_of(exc: BaseException) -> str:
    if isinstance(exc, OutputNotComparable):
        return R.Symptom.NOT_COMPARABLE
    return R.Symptom.OOM if _is_oom(exc) else R.Symptom.CRASH


def _is_oom(exc: BaseException) -> bool:
    text = R.exception_text(exc).lower()
    return (
        isinstance(exc, (torch.OutOfMemoryError, MemoryError))
        or "out of memory" in text
        or "can't allocate memory" in text
        or "cannot allocate memory" in text
    )


def _traceback(exc: BaseException) -> str:
    """The traceback, even when the exception's message cannot be made."""
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:
        return "".join(traceback.format_tb(exc.__traceback__)) + f"{type(exc).__name__}: {R.exception_text(exc)}"
