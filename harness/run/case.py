"""Run one case: eager and compiled on identical inputs, judge, and localize a divergence.

`gather` (and `run_case`, which also decides the run) never raises for a problem of the case itself: whatever happens
(build error, compile crash, OOM, divergence) comes back as a `CaseResult` and the facts it holds.
Global torch state (Dynamo/Inductor config, default dtype, grad mode, ...) is
restored after every case, so no verdict depends on the cases run before it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from harness import records as R
from harness.devices import BackendMismatch, Device, get_device
from harness.judge import decision
from harness.judge.known_failures import Expectation
from harness.judge.sent_values import SizeValues
from harness.registry import Case
from harness.run import process_state
from harness.run.config import EXTRA_FOR, RunConfig, missing_requirements, new_record
from harness.run.contracts import breach_answer, first_breach
from harness.run.diagnoses import say_low_precision_atomics
from harness.run.errors import (
    CASE_RAISES,
    CaseFailure,
    MemoryViolation,
    NoEagerReference,
    NoSecondSize,
    NothingCompiled,
    symptom_of,
    traceback_text,
)
from harness.run.eager_gaps import SurrogateGap
from harness.run.localize_run import captured_launch
from harness.inductor_compat.torch_npu_backend import rewritten_load
from harness.run.launcher_narrowing import NarrowingFinding, stop_answer
from harness.run.sides import EagerSide, compiled_run, dynamic_run
from harness.run.verdict import conclude_sizes, settle_verdict, values_of
from harness.torch_import import NPU_PATCHES, npu_patches_active


def run_case(
    case: Case, dtype: torch.dtype, mode: str, config: RunConfig, expectation: Expectation | None = None
) -> R.CaseResult:
    """One run of a case in this process, decided here (`harness.judge.decision`) with its `expectation` (None:
    the verdict as it is, no expected failure applied)."""
    record = gather(case, dtype, mode, config)
    decision.conclude(record, record.facts, expectation)
    return record


def not_run(
    case: Case,
    dtype: torch.dtype,
    mode: str,
    config: RunConfig,
    stage: str | None,
    *,
    error: R.ErrorInfo | None = None,
    symptom: str | None = None,
    skipped: str | None = None,
    expectation: Expectation | None = None,
) -> R.CaseResult:
    """The record of a run that never ran, or whose process never answered, decided: a skip (`skipped`: why) or
    an error at `stage` with its `symptom`."""
    record = new_record(case, dtype, mode, config)
    if skipped is not None:
        record.facts.tested_nothing(stage, skipped)
    else:
        record.error = error
        record.facts.failed(stage, symptom)
    decision.conclude(record, record.facts, expectation)
    return record


def gather(
    case: Case,
    dtype: torch.dtype,
    mode: str,
    config: RunConfig,
    on_verdict: Callable[[R.CaseResult], None] | None = None,
    on_values: Callable[[list[SizeValues]], None] | None = None,
) -> R.CaseResult:
    """One run of a case, undecided: its record with what the run found (`record.facts`), for whoever decides it
    (`run_case` here; a case process's worker has it judged and decided apart from the case's code). With
    `--extract`, a failure's repros are written once the run is over; `on_verdict` gets the record first (a worker
    has it decided then, so a crash while extracting cannot cost the verdict). `on_values` gets what each size was
    judged on, once the run is over (for the judge, `harness.judge.sent_values`). torch runs as it does outside
    its own CI, whatever `CI` says here (`inductor_compat.torch_ci`)."""
    from harness.inductor_compat import torch_ci

    with torch_ci.hidden():
        return _run(case, dtype, mode, config, on_verdict, on_values)


def _run(
    case: Case,
    dtype: torch.dtype,
    mode: str,
    config: RunConfig,
    on_verdict: Callable[[R.CaseResult], None] | None,
    on_values: Callable[[list[SizeValues]], None] | None,
) -> R.CaseResult:
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
        record.facts.tested_nothing(None, reason)
        return record

    record.versions = device.versions()
    record.device_name = device.device_name()
    if not _compiler_loaded(device, case, config, record):
        return record
    started = time.perf_counter()
    changed: list[str] = []
    captured: Any = None  # the localized launch, kept for `--extract` (written once the run is over)
    eager_side: EagerSide | None = None
    with device.numerics(), torch_state.preserved(changed), process_state.preserved(changed):
        record.compile_config = {**torch_state.config_set(), NPU_PATCHES: npu_patches_active()}
        try:
            eager_side = EagerSide.make(case, dtype, mode, config, device, record)
            if config.runs_dynamic(case):
                eager_side, compiled, sizes = dynamic_run(eager_side, dtype, config, device, record)
                settle_verdict(eager_side, compiled, config, record)
                conclude_sizes(sizes, record, eager_side.case, config.dynamic_strict)
                judged = sizes.judged
            else:
                compiled = compiled_run(eager_side, config, record)
                settle_verdict(eager_side, compiled, config, record)
                judged = [(eager_side, compiled)]
            say_low_precision_atomics(eager_side, record)
            if on_values is not None:
                on_values([values_of(*pair) for pair in judged])
            if config.extract_dir and decision.outcome(record.facts).status == R.FAIL:
                captured = captured_launch(eager_side, compiled, config, record)
        except CaseFailure as failure:
            if isinstance(failure.cause, NoSecondSize):
                record.facts.tested_nothing(failure.stage, f"dynamic: {failure.cause}")
            elif (limit := device.unsupported(failure.cause)) is not None:
                record.facts.tested_nothing(failure.stage, limit)
            elif isinstance(failure.cause, SurrogateGap):
                record.facts.tested_nothing(failure.stage, str(failure.cause))
            elif case.generated and isinstance(failure.cause, NoEagerReference):
                record.facts.tested_nothing(failure.stage, str(failure.cause))
            elif case.generated and failure.stage == R.Stage.EAGER:
                # No eager result, no reference: the inputs are not a test of the compiler.
                cause = failure.cause
                record.facts.tested_nothing(
                    failure.stage, f"eager raises on these inputs ({type(cause).__name__}: {R.exception_line(cause)})"
                )
            elif case.generated and isinstance(failure.cause, NothingCompiled):
                breaks = "; ".join(record.graph_break_reasons[:3]) or "no graph break reported"
                record.facts.tested_nothing(
                    failure.stage, f"Dynamo compiled nothing of this sample ({breaks}): no test of Inductor"
                )
            elif failure.stage == R.Stage.COMPILE and (violation := MemoryViolation.found_in(failure.cause)):
                finding = None
                if eager_side is not None and not config.runs_dynamic(case):
                    finding = stop_answer(violation, eager_side, config, record)
                out_of_bounds(violation, record, finding)
            else:
                record.facts.failed(failure.stage, failure.symptom or symptom_of(failure.cause))
                record.error = R.ErrorInfo(
                    type(failure.cause).__name__, R.exception_text(failure.cause), traceback_text(failure.cause)
                )
                if eager_side is not None and failure.stage != R.Stage.EAGER and (breach := first_breach(eager_side)):
                    # Eager ran and the compiled side broke: a custom op's broken contract says why.
                    record.diagnosis = breach_answer(breach)
        except CASE_RAISES as exc:  # noqa: BLE001 - the harness's own bug: this run errs, the worker and the run go on
            record.facts.failed(R.Stage.WORKER, R.Symptom.CRASH)
            record.error = R.ErrorInfo(
                type(exc).__name__,
                f"{R.HARNESS_FAILED} on this case (a harness bug): {R.exception_text(exc)}",
                traceback_text(exc),
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


def out_of_bounds(violation: MemoryViolation, record: R.CaseResult, finding: NarrowingFinding | None = None) -> None:
    """The device's memory checker stopped a compiled kernel at a load or store outside its buffers: the run fails,
    and its answer is that kernel, at that access (what the checker saw, not a replay's inference): its code is
    wrong, or its launcher (`finding`, from `launcher_narrowing.stop_answer`: a rerun showed the buffer is the
    launcher's narrowed copy). Where the rerun with every layout kept stopped the kernel again, the answer is that
    stop: the kernel's own. The record's `mechanism` is what the rerun showed, else the rewrite of torch_npu's
    codegen that made the stopped load (`rewritten_load`), else None."""
    kept = finding.kept_layout_stop if finding is not None else None
    stop = kept or violation
    said = stop.said()
    record.facts.out_of_bounds = f"{stop.kernel}: {said}"
    if finding is not None and kept is not None:
        isolated = finding.said
    elif finding is not None:
        isolated = f"{finding.said}; through its own launcher the device's memory checker stopped it at {said}"
    else:
        isolated = f"kernel is wrong: the device's memory checker stopped it at {said}"
    record.first_divergent_kernel = R.Localization(
        answer=R.Answer.KERNEL,
        diverged=True,
        name=stop.kernel,
        kind="triton",
        stage="inductor",
        source=stop.line or "",
        isolated=isolated,
    )
    if finding is not None:
        record.mechanism = finding.mechanism
    elif (rewritten := rewritten_load(stop.line)) is not None:
        record.mechanism = rewritten[0]
    kept_said = " with every 64-bit argument keeping its layout" if kept is not None else ""
    record.diagnosis = f"{stop.kernel} makes {said}{kept_said}; the run's values were not compared"


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
        record.facts.failed(R.Stage.SETUP, R.Symptom.BACKEND_MISMATCH)
        record.error = R.ErrorInfo(type(exc).__name__, str(exc))
    except Exception as exc:  # noqa: BLE001 - the device's own loader failed (a missing compiler package)
        record.facts.failed(R.Stage.SETUP, R.Symptom.CRASH)
        record.error = R.ErrorInfo(
            type(exc).__name__,
            f"loading the {device.name} compiler backend failed: {R.exception_text(exc)}",
            traceback_text(exc),
        )
    return False


def _release(device: Device, record: R.CaseResult) -> None:
    """Give the case's device memory back; a device fault that surfaces only now makes the run an error."""
    try:
        device.release()
    except Exception as exc:  # noqa: BLE001 - a kernel's asynchronous fault (misaligned address, illegal access)
        # Reported by the first device call after it: whatever this run concluded was computed on a faulted device.
        record.facts.failed(R.Stage.WORKER, R.Symptom.CRASH)
        record.error = R.ErrorInfo(
            type(exc).__name__,
            f"the device reported a fault after the run ({R.exception_text(exc)}): a kernel "
            "launched since the last synchronization (this case's, after its results were read) faulted; the "
            "worker process is replaced",
            traceback_text(exc),
        )


def _extract(captured: Any, case: Case, dtype: torch.dtype, mode: str, config: RunConfig, record: R.CaseResult) -> None:
    """Write and verify the repros of a captured launch (after the run, with its state restored)."""
    from harness.extraction.extract import FailingRun, extract

    started = time.perf_counter()
    try:
        record.extraction = extract(captured, FailingRun(case, dtype, mode, config, record, run_case))
        record.extracted = record.extraction.extracted
    except Exception as exc:  # noqa: BLE001 - extraction must never cost the run its verdict
        record.extracted = R.Reproduction.DOES_NOT_REPRODUCE
        record.warnings.append(f"--extract failed ({type(exc).__name__}: {R.exception_line(exc)})")
    record.timings["extract"] = round(record.timings.get("extract", 0.0) + time.perf_counter() - started, 3)
