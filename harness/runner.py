"""Run one case: eager and compiled on identical inputs, then compare.

`run_case` never raises for a problem of the case itself: whatever happens
(build error, compile crash, OOM, divergence) comes back as a `CaseResult`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_flatten

from . import records as R
from .compare import compare_tensors
from .devices import Device, get_device
from .inputs import TensorSpec, clone_exact, materialize, seed_for
from .bisect import KernelBisector
from .registry import Case, Program


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
                               dtype=record.dtype, mode=record.mode, emulation=record.emulation)
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
        record.compile_options = _compile_options(case, config, device)
        observed = _run_and_compare(case, dtype, mode, config, device, record)
        record.outputs, record.reference = observed.comparisons, observed.reference
        diverged = not all(o.passed for o in record.outputs)
        record.status = R.FAIL if diverged else R.PASS
        if diverged:
            record.stage, record.symptom = "compare", "divergence"
        if config.bisect and record.first_divergent_kernel is not None:
            with _stage("reference", record.timings):
                record.first_divergent_kernel["stage"] = coarse_stage(case, dtype, mode, config) if diverged else None
        stats = record.injection_stats or {}
        if "hits" in stats and not stats["hits"]:
            record.diagnosis = f"the injected fault selected none of the {stats['launches']} kernel launches"
        inexact = any(o.max_abs > 0 or o.bad for o in record.outputs)
        if inexact and config.inject and injection_narrows(config.inject):
            with _stage("reference", record.timings):
                record.diagnosis = narrowing_diagnosis(observed, mode, device, record)
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
    """What one eager-vs-compiled run saw, kept for follow-up analyses."""

    program: Program
    inputs: list[Any]
    actual: dict[str, torch.Tensor]
    comparisons: list[R.OutputComparison]
    reference: str


def _run_and_compare(case: Case, dtype: torch.dtype, mode: str, config: RunConfig, device: Device,
                     record: R.CaseResult) -> _Observation:
    timings = record.timings
    seed = seed_for(case.name, dtype_name(dtype), mode)
    with _stage("build", timings):
        torch._dynamo.reset()
        program = _as_program(case.build(dtype))
        if isinstance(program.fn, torch.nn.Module):
            program.fn.to(device.torch_device())
        inputs = _materialize_inputs(program.inputs, dtype, device, seed)
    with _stage("eager", timings):
        expected = execute(program.fn, inputs, mode, device, seed)
    with _stage("compile", timings):
        compiled_fn = torch.compile(_fresh(program.fn), backend=config.backend, dynamic=case.dynamic,
                                    **_compile_kwargs(config, record.compile_options))
        handler = make_handler(config.inject) if config.inject else None
        bisector = KernelBisector(inner=handler, tolerances=case.tolerances,
                                  use_fp64_reference=(config.reference or case.reference) != "none") if config.bisect else None
        with observed_launches(handler, bisector):
            actual = execute(compiled_fn, inputs, mode, device, seed)
        if handler is not None:
            record.injection_stats = dict(handler.stats)
        if bisector is not None:
            record.first_divergent_kernel = bisector.result()

    reference_policy = config.reference or case.reference
    references: dict[str, torch.Tensor] = {}
    with _stage("compare", timings):
        comparisons = _compare_all(actual, expected, case, references)
    needs_reference = reference_policy == "fp64" or (
        reference_policy == "auto" and any(not c.passed and c.rule == "tolerance" for c in comparisons))
    if not needs_reference:
        return _Observation(program, inputs, actual, comparisons, "eager")
    with _stage("reference", timings):
        references = execute(program.fn, _to_float64(inputs), mode, device, seed, float64=True)
    with _stage("compare", timings):
        comparisons = _compare_all(actual, expected, case, references)
    return _Observation(program, inputs, actual, comparisons, "eager+fp64")


# Backends that stop before Inductor's codegen, in pipeline order (CompilerBisector's backend stages).
COARSE_STAGES = ("aot_eager", "aot_eager_decomp_partition")


def coarse_stage(case: Case, dtype: torch.dtype, mode: str, config: RunConfig) -> str:
    """The first stage of the pipeline where the divergence appears: a backend before Inductor, or Inductor.

    Injections act on generated kernels, so they are left out of these runs.
    """
    for backend in COARSE_STAGES:
        earlier = dataclasses.replace(config, backend=backend, bisect=False, inject=None, compile_options={},
                                      compile_mode=None)
        if run_case(case, dtype, mode, earlier).status in (R.FAIL, R.XFAIL):
            return backend
    return "inductor"


def injection_narrows(text: str) -> bool:
    from .emulation import parse_injection

    return parse_injection(text)[0].narrows


def narrowing_diagnosis(observed: _Observation, mode: str, device: Device, record: R.CaseResult) -> str:
    """Tell precision narrowing from misaddressing: compare compiled with eager on narrowed inputs.

    If every compiled value equals eager computed from int32/float32-rounded
    inputs (float64 outputs within float32's tolerance), the only cause is
    narrowing; elements that still differ were read or written at wrong addresses.
    """
    from .emulation import NARROWED_DTYPES
    from .tolerances import DEFAULT_TOLERANCES

    seed = seed_for(record.case, record.dtype, mode)
    narrowed_inputs = [clone_exact(clone_exact(x, NARROWED_DTYPES[x.dtype]), x.dtype)
                       if isinstance(x, torch.Tensor) and x.dtype in NARROWED_DTYPES else x for x in observed.inputs]
    narrowed = execute(observed.program.fn, narrowed_inputs, mode, device, seed)
    actual = observed.actual
    float32_tolerance = {torch.float64: DEFAULT_TOLERANCES[torch.float32]}
    misaddressed = {name: compare_tensors(name, actual[name], narrowed[name], tolerances=float32_tolerance).bad
                    for name in narrowed if name in actual}
    wrong = {name: bad for name, bad in misaddressed.items() if bad}
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
                            reference=references.get(name)) for name in expected]


def execute(fn: Callable[..., Any], inputs: list[Any], mode: str, device: Device, seed: int,
            float64: bool = False) -> dict[str, torch.Tensor]:
    """Run `fn` on exact copies of `inputs`; in training also backward. Returns named tensors."""
    args = [clone_exact(x, torch.float64 if float64 and x.is_floating_point() else None)
            if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]
    if float64 and isinstance(fn, torch.nn.Module):
        fn = copy.deepcopy(fn).double()
    versions = [a._version if isinstance(a, torch.Tensor) else None for a in args]
    with torch.enable_grad() if mode == "training" else torch.no_grad():
        flat_outputs, _ = tree_flatten(fn(*args))
        tensors = [t for t in flat_outputs if isinstance(t, torch.Tensor)]
        named = {f"out{i}": t.detach() for i, t in enumerate(tensors)}
        # In-place updates of inputs are results too (the version counter says which happened).
        named.update({f"mutated_in{i}": a.detach() for i, (a, v) in enumerate(zip(args, versions))
                      if v is not None and a._version != v})
        if mode == "training":
            named.update(_gradients(fn, args, tensors, seed))
    device.synchronize()
    return named


def _gradients(fn: Callable[..., Any], args: list[Any], outputs: list[torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    wrt = [(f"grad_in{i}", a) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    if isinstance(fn, torch.nn.Module):
        module = getattr(fn, "_orig_mod", fn)  # compiled modules keep their parameters there
        wrt += [(f"grad.{n}", p) for n, p in module.named_parameters() if p.requires_grad]
    differentiable = [t for t in outputs if t.requires_grad]
    if not wrt or not differentiable:
        raise RuntimeError("training mode needs an input or parameter that requires grad and an output that depends on it")
    generator = torch.Generator().manual_seed(seed ^ 0x5EED)
    # The same cotangents for eager, compiled and the fp64 reference: drawn on the CPU in float64.
    cotangents = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.device, t.dtype)
                  for t in differentiable]
    grads = torch.autograd.grad(differentiable, [t for _, t in wrt], cotangents, allow_unused=True)
    return {name: g for (name, _), g in zip(wrt, grads) if g is not None}


def _materialize_inputs(inputs: Any, dtype: torch.dtype, device: Device, seed: int) -> list[Any]:
    generator = torch.Generator().manual_seed(seed)
    made = []
    for item in inputs:
        if isinstance(item, TensorSpec):
            made.append(materialize(item.with_dtype(dtype), generator, device.torch_device()))
        elif isinstance(item, torch.Tensor):
            made.append(clone_exact(item.to(device.torch_device())))
        else:
            made.append(item)
    return made


def _to_float64(inputs: list[Any]) -> list[Any]:
    return [clone_exact(x, torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in inputs]


def _as_program(built: Program | tuple) -> Program:
    if isinstance(built, Program):
        return built
    fn, inputs = built
    return Program(fn, inputs)


def _fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
    # A module is copied so compiled training never shares parameters or state with eager.
    return copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn


def _compile_options(case: Case, config: RunConfig, device: Device) -> dict[str, Any]:
    return {**device.compile_options(config.npu_backend), **case.compile_options, **config.compile_options}


def _compile_kwargs(config: RunConfig, options: dict[str, Any]) -> dict[str, Any]:
    # torch.compile accepts `options` for Inductor only, and never together with `mode`.
    if config.backend != "inductor":
        return {"mode": config.compile_mode} if config.compile_mode else {}
    if config.compile_mode:
        from torch._inductor import list_mode_options

        options = {**list_mode_options(config.compile_mode), **options}
    return {"options": options} if options else {}


def make_handler(text: str) -> Callable[[Any], Any]:
    """The launch handler of a launch-boundary emulation or kernel fault (see harness.emulation)."""
    from .emulation import make_handler as make_injection_handler

    return make_injection_handler(text)


@contextlib.contextmanager
def observed_launches(handler: Callable[[Any], Any] | None, bisector: Any) -> Iterator[None]:
    """Route the compiled run's launches through the injection and/or the bisector."""
    from .inductor_compat import capture_graphs, intercept_launches

    with contextlib.ExitStack() as stack:
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

