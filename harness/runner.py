"""Run one case: eager and compiled on identical inputs, then compare.

`run_case` never raises for a problem of the case itself: whatever happens
(build error, compile crash, OOM, divergence) comes back as a `CaseResult`.
"""

from __future__ import annotations

import contextlib
import gc
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from . import records as R
from .bisect import KernelBisector
from .compare import compare_tensors
from .devices import Device, get_device
from .emulation import NARROWED_DTYPES, make_handler, parse_injection
from .execution import Inputs, Wrap, execute, materialize_inputs
from .inputs import clone_exact, seed_for
from .registry import Case, Program

# Backends that stop before Inductor's codegen, in pipeline order (CompilerBisector's backend stages).
COARSE_STAGES = ("aot_eager", "aot_eager_decomp_partition")


@dataclass(frozen=True)
class RunConfig:
    device: str = "cpu"
    backend: str = "inductor"
    npu_backend: str | None = None
    compile_mode: str | None = None
    compile_options: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None  # overrides the case's own choice when set
    inject: str | None = None
    bisect: bool = False

    def command_for(self, case: str, dtype: str, mode: str) -> str:
        parts = ["python -m harness run", case, f"--device {self.device}", f"--dtype {dtype}", f"--mode {mode}"]
        if self.backend != "inductor":
            parts.append(f"--backend {self.backend}")
        if self.npu_backend:
            parts.append(f"--npu-backend {self.npu_backend}")
        if self.compile_mode:
            parts.append(f"--compile-mode {self.compile_mode}")
        parts += [f"--compile-option {k}={v}" for k, v in self.compile_options.items()]
        if self.reference:
            parts.append(f"--reference {self.reference}")
        if self.inject:
            parts.append(f"--inject {self.inject}")
        if self.bisect:
            parts.append("--bisect")
        return " ".join(parts)


class CaseFailure(Exception):
    """An exception raised inside the case, tagged with the stage it broke."""

    def __init__(self, stage: str, cause: BaseException):
        super().__init__(str(cause))
        self.stage, self.cause = stage, cause


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def missing_requirements(case: Case) -> list[str]:
    import importlib.util

    return [name for name in case.requires if importlib.util.find_spec(name) is None]


def new_record(case: Case, dtype: torch.dtype, mode: str, config: RunConfig) -> R.CaseResult:
    """A record with the run's identity filled in and nothing measured yet."""
    return R.CaseResult(
        case=case.name, device=config.device, backend=config.backend, dtype=dtype_name(dtype), mode=mode,
        status=R.PASS, tags=list(case.tags), issue=case.issue, size=case.size,
        npu_backend=config.npu_backend if config.device == "npu" else None,
        emulation=config.inject, command=config.command_for(case.name, dtype_name(dtype), mode),
    )


def apply_known_failure(record: R.CaseResult, case: Case) -> R.CaseResult:
    """A declared failure turns fail/error into xfail and pass into xpass (strict)."""
    known = case.known_failure(device=record.device, backend=record.backend, npu_backend=record.npu_backend,
                               dtype=record.dtype, mode=record.mode, emulation=record.emulation,
                               torch=record.versions.get("torch") or torch.__version__)
    if known is not None and record.status != R.SKIP:
        record.reason = known.reason
        record.status = R.XPASS if record.status == R.PASS else R.XFAIL
    return record


def run_case(case: Case, dtype: torch.dtype, mode: str, config: RunConfig) -> R.CaseResult:
    device = get_device(config.device)
    record = new_record(case, dtype, mode, config)
    reason = device.unavailable_reason()
    if reason is None and (missing := missing_requirements(case)):
        reason = f"needs {', '.join(missing)}: pip install -e '.[models]'"
    if reason is not None:
        record.status, record.reason = R.SKIP, reason
        return record

    record.versions = device.versions()
    record.device_name = device.device_name()
    started = time.perf_counter()
    try:
        record.compile_options = {**device.compile_options(config.npu_backend), **case.compile_options,
                                  **config.compile_options}
        observed = _Observation.make(case, dtype, mode, config, device, record.timings)
        _compiled_run(observed, config, record)
        _conclude(observed, config, record)
    except CaseFailure as failure:
        record.status, record.stage = R.ERROR, failure.stage
        record.symptom = "oom" if _is_oom(failure.cause) else "crash"
        record.error = R.ErrorInfo(type(failure.cause).__name__, str(failure.cause),
                                   "".join(traceback.format_exception(failure.cause)))
    finally:
        record.duration_s = round(time.perf_counter() - started, 3)
        _release(device)
    return apply_known_failure(record, case)


@dataclass
class _Observation:
    """A case's eager side; it judges any compiled run against it."""

    case: Case
    mode: str
    device: Device
    seed: int
    program: Program
    inputs: Inputs
    expected: dict[str, torch.Tensor]
    reference_policy: str
    timings: dict[str, float]
    actual: dict[str, torch.Tensor] = field(default_factory=dict)
    comparisons: list[R.OutputComparison] = field(default_factory=list)
    references: dict[str, torch.Tensor] | None = None  # float64 results, made on first need
    nondeterministic: list[str] = field(default_factory=list)

    @classmethod
    def make(cls, case: Case, dtype: torch.dtype, mode: str, config: RunConfig, device: Device,
             timings: dict[str, float]) -> "_Observation":
        seed = seed_for(case.name, dtype_name(dtype), mode)
        with _stage("build", timings):
            torch._dynamo.reset()
            program = _as_program(case.build(dtype))
            if isinstance(program.fn, torch.nn.Module):
                program.fn.to(device.torch_device())
            inputs = materialize_inputs(program.inputs, program.kwargs, dtype, device, seed)
        with _stage("eager", timings):
            expected = execute(program.fn, inputs, mode, device, seed)
        observed = cls(case, mode, device, seed, program, inputs, expected, config.reference or case.reference, timings)
        if mode == "train_step":  # as torchbench: a model whose eager step is not repeatable cannot be judged
            with _stage("eager", timings):
                again = execute(program.fn, inputs, mode, device, seed)
            observed.nondeterministic = [c.name for c in _compare_all(again, expected, case, {}) if not c.passed]
        return observed

    @property
    def reference(self) -> str:
        return "eager" if self.references is None else "eager+fp64"

    def run(self, wrap: Wrap) -> dict[str, torch.Tensor]:
        return execute(self.program.fn, self.inputs, self.mode, self.device, self.seed, wrap=wrap)

    def judge(self, actual: dict[str, torch.Tensor]) -> list[R.OutputComparison]:
        with _stage("compare", self.timings):
            comparisons = _compare_all(actual, self.expected, self.case, self.references or {})
        wanted = self.reference_policy == "fp64" or (
            self.reference_policy == "auto" and any(not c.passed and c.rule == "tolerance" for c in comparisons))
        if not wanted or self.references is not None:
            return comparisons
        with _stage("reference", self.timings):
            self.references = execute(self.program.fn, self.inputs, self.mode, self.device, self.seed, float64=True)
        with _stage("compare", self.timings):
            return _compare_all(actual, self.expected, self.case, self.references)

    def compiler(self, backend: str, **compile_kwargs: Any) -> Wrap:
        return lambda fn: torch.compile(fn, backend=backend, dynamic=self.case.dynamic, **compile_kwargs)


def _compiled_run(observed: _Observation, config: RunConfig, record: R.CaseResult) -> None:
    """The compiled run, through the injection and the bisector when asked for; counts graphs."""
    from torch._dynamo.utils import counters

    handler = make_handler(config.inject) if config.inject else None
    bisector = KernelBisector(inner=handler, tolerances=observed.case.tolerances,
                              use_fp64_reference=observed.reference_policy != "none") if config.bisect else None
    counters.clear()
    with _stage("compile", observed.timings), observed_launches(handler, bisector):
        observed.actual = observed.run(observed.compiler(config.backend, **_compile_kwargs(config, record.compile_options)))
    record.graphs = {"graphs": int(counters["stats"]["unique_graphs"]),
                     "graph_breaks": int(sum(counters["graph_break"].values()))}
    if handler is not None:
        record.injection_stats = dict(handler.stats)
    if bisector is not None:
        record.first_divergent_kernel = bisector.result()
    observed.comparisons = observed.judge(observed.actual)


def _conclude(observed: _Observation, config: RunConfig, record: R.CaseResult) -> None:
    """Status, stage, symptom, and the follow-up analyses a divergence calls for."""
    record.outputs = observed.comparisons
    diverged = not all(o.passed for o in record.outputs)
    record.status = R.FAIL if diverged else R.PASS
    if diverged:
        record.stage, record.symptom = "compare", "divergence"
    if observed.nondeterministic:
        record.status, record.stage, record.symptom = R.NONDETERMINISTIC, "eager", "nondeterminism"
        record.diagnosis = f"two eager runs differ ({', '.join(observed.nondeterministic[:5])}): no verdict on compiled"
    if config.bisect and record.first_divergent_kernel is not None:
        with _stage("stage", record.timings):
            record.first_divergent_kernel["stage"] = coarse_stage(observed) if diverged else None
    record.reference = observed.reference
    stats = record.injection_stats or {}
    if "hits" in stats and not stats["hits"]:
        record.diagnosis = f"the injected fault selected none of the {stats['launches']} kernel launches"
    narrows = config.inject is not None and parse_injection(config.inject)[0].narrows
    if narrows and stats.get("converted_args") and _narrowing_visible(record):
        with _stage("reference", record.timings):
            record.diagnosis = narrowing_diagnosis(observed)


def coarse_stage(observed: _Observation) -> str:
    """The first stage of the pipeline where the divergence appears: a backend before Inductor, or Inductor.

    Each stage's compiled run is judged against the same eager results.
    Injections act on generated kernels, so these runs have none.
    """
    for backend in COARSE_STAGES:
        torch._dynamo.reset()
        if not all(c.passed for c in observed.judge(observed.run(observed.compiler(backend)))):
            return backend
    return "inductor"


def _narrowing_visible(record: R.CaseResult) -> bool:
    """Something for narrowing to explain: a failure, or an inexact 64-bit result."""
    return any(not o.passed or (o.dtype in ("int64", "float64") and (o.max_abs > 0 or o.bad)) for o in record.outputs)


def narrowing_diagnosis(observed: _Observation) -> str:
    """Tell precision narrowing from misaddressing: compare compiled with eager on narrowed inputs.

    If every compiled value equals eager computed from int32/float32-rounded
    inputs (float64 outputs within float32's tolerance), the only cause is
    narrowing; elements that still differ were read or written at wrong addresses.
    """
    from .tolerances import DEFAULT_TOLERANCES

    narrowed_inputs = observed.inputs.map_tensors(
        lambda t: clone_exact(clone_exact(t, NARROWED_DTYPES[t.dtype]), t.dtype) if t.dtype in NARROWED_DTYPES
        else clone_exact(t))
    narrowed = execute(observed.program.fn, narrowed_inputs, observed.mode, observed.device, observed.seed)
    float32_tolerance = {torch.float64: DEFAULT_TOLERANCES[torch.float32]}
    wrong = {name: bad for name in narrowed if name in observed.actual
             if (bad := compare_tensors(name, observed.actual[name], narrowed[name], tolerances=float32_tolerance).bad)}
    if not wrong:
        return ("precision narrowing, not layout: every compiled value equals eager on int32/float32-narrowed "
                "inputs (float64 within float32 tolerance)")
    details = ", ".join(f"{name}: {bad} elements" for name, bad in wrong.items())
    return f"layout: values differ from eager even on narrowed inputs, so they were read or written at wrong addresses ({details})"


def _compare_all(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], case: Case,
                 references: dict[str, torch.Tensor]) -> list[R.OutputComparison]:
    missing = sorted(set(expected) ^ set(actual))
    if missing:
        raise RuntimeError(f"compiled and eager differ in which outputs, gradients or input mutations they produce: {missing}")
    return [compare_tensors(name, actual[name], expected[name], tolerances=case.tolerances,
                            reference=references.get(name), cosine_fallback=case.cosine_fallback)
            for name in expected]


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
        from torch._inductor import list_mode_options

        options = {**list_mode_options(config.compile_mode), **options}
    return {"options": options} if options else {}


@contextlib.contextmanager
def observed_launches(handler: Callable[[Any], Any] | None, bisector: KernelBisector | None) -> Iterator[None]:
    """Route the compiled run's launches through the injection and/or the bisector."""
    from .inductor_compat import capture_graphs, intercept_launches
    from .inductor_compat.kernel_variants import rewriting

    with contextlib.ExitStack() as stack:
        # Rewritten-kernel emulations (reduction-partial, ...): variants compile as wrapper modules load.
        stack.enter_context(rewriting(getattr(handler, "rewriters", ())))
        if bisector is not None:
            stack.enter_context(capture_graphs(bisector.observe_graph))
        top = bisector.on_launch if bisector is not None else handler
        if top is not None:
            stack.enter_context(intercept_launches(top))
        yield


@contextlib.contextmanager
def _stage(stage: str, timings: dict[str, float]) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    except CaseFailure:
        raise
    except Exception as exc:
        raise CaseFailure(stage, exc) from exc
    finally:
        timings[stage] = round(timings.get(stage, 0.0) + time.perf_counter() - started, 3)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _release(device: Device) -> None:
    gc.collect()
    if device.name == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def runs_of(case: Case, dtypes: list[str] | None, modes: list[str] | None) -> list[tuple[torch.dtype, str]]:
    """The (dtype, mode) pairs of a case that the user's filters keep."""
    chosen_dtypes = [d for d in case.dtypes if not dtypes or dtype_name(d) in dtypes]
    chosen_modes = [m for m in case.modes if not modes or m in modes]
    return [(d, m) for d in chosen_dtypes for m in chosen_modes]
