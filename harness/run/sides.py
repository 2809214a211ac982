"""The two sides of a run: eager (run twice, the reference every compiled run is judged against) and compiled
(the program compiled through the injection, if any; a dynamic run's second size compiled once at the first)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from harness import records as R
from harness.devices import Device, get_device
from harness.inject.launch import make_handler, parse_injection
from harness.inputs import seed_for
from harness.judge.colliding_writes import CollidingWrites, LowPrecisionSums, undefined_elements
from harness.judge.compare import VerdictPolicy
from harness.judge.results import Results
from harness.judge.sent_values import all_pass, compare_results
from harness.layout import dtype_name, is_non_overlapping, overlaps_beyond_broadcast
from harness.registry import Case, Program
from harness.run.config import RunConfig
from harness.run.dynamic import DynamicPlan
from harness.run.errors import CaseFailure, InjectionMissed, NoEagerReference, NoSecondSize, timed_stage
from harness.run.program import Inputs, Session, materialize_inputs, module_state


@contextlib.contextmanager
def uninitialized_memory_filled() -> Iterator[None]:
    """Every tensor an op allocates with `empty` filled (NaN, or an integer dtype's largest value) while the
    block runs. torch fills only under deterministic algorithms; `warn_only` keeps every op running (ops with
    no deterministic kernel warn instead of raising). Both settings are put back as they were."""
    import warnings

    settings = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.use_deterministic_algorithms(settings[0], warn_only=settings[1])
        torch.utils.deterministic.fill_uninitialized_memory = settings[2]


def unwritten_outputs(eager: Session, expected: Results) -> list[str]:
    """The results of which eager run once more with allocated memory filled holds the fill where `expected` (a
    plain run) does not: elements no op wrote. Only the fill's own values count (NaN, an integer dtype's largest),
    so another algorithm chosen under deterministic algorithms (a convolution's) changes nothing here. None where
    an op refuses to run so, even with warn_only."""
    try:
        with uninitialized_memory_filled():
            filled = eager.run().tensors()
    except Exception:  # noqa: BLE001 - no check: the plain runs decide as before the fill existed
        return []
    found = []
    for name, value in expected.tensors().items():
        other = filled.get(name)
        if not (isinstance(other, torch.Tensor) and other.shape == value.shape and other.dtype == value.dtype):
            continue
        try:
            if bool((_holds_fill(other) & ~_holds_fill(value)).any()):
                found.append(name)
        except RuntimeError:  # a dtype whose comparisons the device lacks (unsigned on an older torch): unchecked
            continue
    return found


def _holds_fill(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_complex():
        return torch.isnan(t.real) | torch.isnan(t.imag)
    if t.is_floating_point():
        return torch.isnan(t)
    if t.dtype == torch.bool:
        return torch.zeros_like(t)  # no value of a bool is left out of its results: not checked
    return t == torch.iinfo(t.dtype).max


@dataclass
class EagerSide:
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
    ) -> "EagerSide":
        """The eager side of the case, built afresh; or of `program` (the case built at another size, for a
        dynamic run's second size). Either way eager runs twice, and a result that is not repeatable is no
        reference (at the second size as at the first)."""
        seed = seed_for(case.name, dtype_name(dtype), mode)
        timings = record.timings
        at_second_size = program is not None
        with timed_stage(R.Stage.BUILD, timings):
            if program is None:
                torch.compiler.reset()
                program = as_program(case.build(dtype))
                if isinstance(program.fn, torch.nn.Module):
                    program.fn.to(device.torch_device())
            inputs = materialize_inputs(program.inputs, program.kwargs, dtype, device, seed)
        with timed_stage(R.Stage.EAGER, timings):
            eager = Session(program.fn, inputs, mode, device, seed)
            writes = CollidingWrites()
            with writes:
                expected = eager.run()
            undefined = {}
            if writes.collisions:
                undefined, said = undefined_elements(eager.run, expected, writes.collisions, case.tolerances)
                record.warnings.append(said + (" (at the second size)" if at_second_size else ""))
        if overlapping := self_overlapping_outputs(expected, eager, broadcast_too=False):
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
        eager_side = cls(case, mode, device, seed, program, inputs, expected, policy, verdict, timings, record)
        # As torchbench: a program whose eager result is not repeatable cannot be judged (eager_two_runs_differ).
        with timed_stage(R.Stage.EAGER, timings):
            again = eager_side.again = eager.run()
            # An op that returns memory it never wrote (flash attention's seed and offset without dropout, CUDA
            # only, so no CPU probe sees it) often repeats in two plain runs: the caching allocator hands the same
            # block back. A generated sample runs once more with allocated memory filled.
            unwritten = unwritten_outputs(eager, expected) if case.generated else []
        if unwritten:
            raise CaseFailure(
                R.Stage.EAGER,
                NoEagerReference(
                    f"eager's result {', '.join(unwritten[:5])} holds memory no op wrote: run with what its ops "
                    "allocate filled (torch.utils.deterministic.fill_uninitialized_memory), it holds the fill where "
                    "a plain run does not, so its values are whatever memory held and no compiled result can be "
                    "judged against them"
                ),
            )
        if not all_pass(again, expected, None, verdict):  # the quick check first: most runs repeat exactly
            comparisons = compare_results(again, expected, None, dataclasses.replace(verdict, eager_repeat=True))
            eager_side.nondeterministic = [c.name for c in comparisons if not c.passed]
            if eager_side.nondeterministic and case.generated:
                # A generated sample whose eager result is not repeatable (an op's seed outputs, atomics beyond
                # summation noise) tests nothing, like other undefined results; a hand-written case is reported
                # `nondeterministic` as it is.
                raise CaseFailure(
                    R.Stage.EAGER,
                    NoEagerReference(
                        f"two eager runs differ ({', '.join(eager_side.nondeterministic[:5])}): eager's result is not "
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
        return eager_side

    @property
    def reference(self) -> str:
        return "eager" if self.references is None else "eager+fp64"

    def judge(self, actual: Results) -> list[R.OutputComparison]:
        with timed_stage(R.Stage.COMPARE, self.timings):
            comparisons = compare_results(actual, self.expected, self.references, self.verdict)
        wanted = self.reference_policy == "fp64" or (
            self.reference_policy == "auto" and any(self.verdict.wants_reference(c) for c in comparisons)
        )
        if wanted and self.references is None and self.make_references():
            with timed_stage(R.Stage.COMPARE, self.timings):
                comparisons = compare_results(actual, self.expected, self.references, self.verdict)
        if self._wants_atomic_baseline(comparisons):
            with timed_stage(R.Stage.REFERENCE, self.timings):
                self.verdict = dataclasses.replace(self.verdict, atomic_baseline=self._atomic_baseline())
            with timed_stage(R.Stage.COMPARE, self.timings):
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

    def make_references(self) -> bool:
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
class CompiledSide:
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
    # Its graphs' explicit casts to float16/bfloat16 from a wider float; None where a graph's lowering facts are
    # missing (a cache hit made by another process).
    casts: list[Any] | None = field(default_factory=list)
    # Those casts are the eager program's, gone from the graphs Inductor lowered (a graph pass removed them).
    casts_removed: bool = False
    # The graph passes that removed them and ignore `emulate_precision_casts` (their labels), where they had to be
    # turned off beside the switch for the program to match eager (several where each removes them once those
    # before it are off).
    casts_removers: list[str] = field(default_factory=list)


def compiled_run(eager_side: EagerSide, config: RunConfig, record: R.CaseResult) -> CompiledSide:
    """The compiled run, through the injection when asked for; counts graphs; judges."""
    from harness.inductor_compat import (
        capture_graphs,
        compile_cache_hits,
        dynamo_graph_counts,
        graph_break_reasons,
        graph_info,
        install_lowering_hook,
        load_kernels_afresh,
        low_precision_atomics,
        low_precision_casts,
        program_accumulates,
        reset_dynamo_counters,
    )

    def handler_factory() -> Any:
        return make_handler(config.inject) if config.inject else None

    injection = parse_injection(config.inject)[0] if config.inject else None
    if injection is not None and injection.needs_memory_checker:
        if not get_device(config.device).checks_memory():
            raise CaseFailure(
                R.Stage.COMPILE,
                ValueError(
                    f"{config.inject} needs a device whose memory accesses are checked (the CPU surrogate's npu in "
                    f"its Triton or torch_npu mode): on {config.device} the store would write memory no buffer owns"
                ),
            )
    handler = handler_factory()
    kwargs = compile_kwargs(config, record.compile_options)
    if injection is not None and injection.first_launches:
        # Its kernels' launches here must be their first, whatever this process compiled before.
        load_kernels_afresh()
    # Lowering facts are kept beside Inductor's cache entries, so a later --bisect on a warm cache finds them.
    install_lowering_hook()
    reset_dynamo_counters()
    try:
        with timed_stage(R.Stage.COMPILE, eager_side.timings), launches_through(handler), capture_graphs() as capture:
            session = eager_side.compiled_session(config.backend, **kwargs)
            results = session.run()
    finally:  # (what the injection touched, also where the compiled run stopped: a memory checker's stop says which)
        if handler is not None:
            record.injection_stats = copy.deepcopy(handler.stats)
    record.graphs = dynamo_graph_counts()
    record.graph_break_reasons = graph_break_reasons()
    # Summation noise is allowed only where the compiled program sums (no compiled graph: allowed).
    eager_side.verdict = dataclasses.replace(eager_side.verdict, accumulated=program_accumulates(capture.called))
    eager_side.low_precision_atomics = low_precision_atomics(capture.called)
    if handler is not None:
        # An injection that changed nothing makes the verdict say nothing of it: a pass would read as evidence.
        if (missed := getattr(handler, "missed", lambda: None)()) is not None:
            raise CaseFailure(
                R.Stage.COMPILE, InjectionMissed(f"{config.inject}: {missed}"), R.Symptom.INJECTION_MISSED
            )

    def compile_again() -> tuple[Session, Session]:
        again = eager_side.compiled_session(config.backend, **kwargs)
        return again, again

    # (None where a graph came from the caches: its facts carry no dtypes, unknown until lowered again.)
    found = [low_precision_casts(info) if info else None for info in map(graph_info, dict.fromkeys(capture.called))]
    casts = None if None in found else [cast for casts in found for cast in casts]
    return CompiledSide(
        session,
        results,
        eager_side.judge(results),
        handler_factory,
        compile_again,
        cache_hits=compile_cache_hits(),
        casts=casts,
    )


@dataclass
class Sizes:
    """A dynamic run's two sizes: each one's comparisons, and whether the second compiled again."""

    first: list[R.OutputComparison]
    second: list[R.OutputComparison]
    recompiled: bool
    recompile_reasons: list[str] = field(default_factory=list)  # Dynamo's: the guards that failed
    # Each size's eager and compiled sides, in order: what the judge gets.
    judged: list[tuple["EagerSide", "CompiledSide"]] = field(default_factory=list)


def dynamic_run(
    eager_side: EagerSide, dtype: torch.dtype, config: RunConfig, device: Device, record: R.CaseResult
) -> tuple[EagerSide, CompiledSide, Sizes]:
    """Eager at the second size first (the first plan it accepts: which dims vary), then one compile at the
    declared size with those dims marked, and the same compiled program run at the second size. The size
    whose results fail first (or the first) is the one concluded and localized."""
    from harness.inductor_compat import compile_ids, dynamo_graph_counts, recompile_reasons
    from harness.run.dynamic import BadDynamicDims, check_second_size, plans_for, shapes

    program = eager_side.program
    try:
        plans = plans_for(program.inputs, program.kwargs, eager_side.case.dynamic_dims)
    except BadDynamicDims as exc:
        raise CaseFailure(R.Stage.BUILD, exc) from None
    if isinstance(plans, str):
        raise CaseFailure(R.Stage.BUILD, NoSecondSize(plans))
    second, rejected = None, None
    for plan in plans:
        args, kwargs = plan.second(program.inputs, program.kwargs)
        try:
            check_second_size((program.inputs, program.kwargs), (args, kwargs), eager_side.case.dynamic_dims)
        except BadDynamicDims as exc:
            raise CaseFailure(R.Stage.BUILD, exc) from None
        try:
            second = EagerSide.make(
                eager_side.case,
                dtype,
                eager_side.mode,
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
    eager_side.dynamic = second.dynamic = plan
    compiled = compiled_run(eager_side, config, record)
    graphs, compiled_before = dynamo_graph_counts()["graphs"], compile_ids()
    # The compiled run's facts (what the program sums), with the second size's own undefined elements.
    second.verdict = dataclasses.replace(eager_side.verdict, undefined=second.verdict.undefined, atomic_baseline={})
    second.low_precision_atomics = eager_side.low_precision_atomics
    handler_factory = compiled.handler_factory
    with timed_stage("second_size", record.timings, wrap=False), launches_through(handler_factory()):
        session = compiled.session.at(second.inputs)
        results = session.run()

    def compile_again_at_the_second_size() -> tuple[Session, Session]:
        at_first, _ = compiled.compile_again()
        return at_first, at_first.at(second.inputs)

    second_compiled = CompiledSide(
        session,
        results,
        second.judge(results),
        handler_factory,
        compile_again_at_the_second_size,
        cache_hits=compiled.cache_hits,
    )
    record.dynamic_sizes = [
        shapes(eager_side.inputs.args, eager_side.inputs.kwargs),
        shapes(second.inputs.args, second.inputs.kwargs),
    ]
    recompiled = dynamo_graph_counts()["graphs"] > graphs
    sizes = Sizes(
        compiled.comparisons,
        second_compiled.comparisons,
        recompiled=recompiled,
        recompile_reasons=recompile_reasons(compiled_before) if recompiled else [],
        judged=[(eager_side, compiled), (second, second_compiled)],
    )
    # The second size is concluded when only it fails, or when eager's result is not repeatable there (no verdict).
    if second.nondeterministic or (
        all(c.passed for c in compiled.comparisons) and not all(c.passed for c in second_compiled.comparisons)
    ):
        return second, second_compiled, sizes
    return eager_side, compiled, sizes


def self_overlapping_outputs(results: Results, session: Session, broadcast_too: bool = True) -> list[str]:
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


def as_program(built: Program | tuple) -> Program:
    if isinstance(built, Program):
        return built
    fn, inputs = built
    return Program(fn, inputs)


def compile_kwargs(config: RunConfig, options: dict[str, Any]) -> dict[str, Any]:
    # torch.compile accepts `options` for Inductor only, and never together with `mode`.
    if config.backend != "inductor":
        return {"mode": config.compile_mode} if config.compile_mode else {}
    if config.compile_mode:
        from harness.inductor_compat import mode_options

        options = {**mode_options(config.compile_mode), **options}
    return {"options": options} if options else {}


@contextlib.contextmanager
def launches_through(handler: Callable[[Any], Any] | None) -> Iterator[None]:
    """Route the compiled run's launches through the injection, when there is one."""
    from harness.inductor_compat import intercept_launches

    with rewriting_for(handler), intercept_launches(handler) if handler is not None else contextlib.nullcontext():
        yield


def rewriting_for(handler: Any) -> contextlib.AbstractContextManager:
    """Rewritten-kernel emulations (reduction-partial, ...) compile their variants as wrapper modules load."""
    from harness.inductor_compat.kernel_variants import rewriting

    return rewriting(getattr(handler, "rewriters", ()))


def loaded_afresh(eager_side: EagerSide, config: RunConfig, record: R.CaseResult) -> Session:
    """The compiled session again, its kernels loaded as a new process would load them (from warm caches)."""
    from harness.inductor_compat import load_kernels_afresh

    load_kernels_afresh()
    return eager_side.compiled_session(config.backend, **compile_kwargs(config, record.compile_options))
