"""How a case run fails: the exceptions that carry a stage, what case code may raise, and the text of a failure."""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from dataclasses import dataclass
from typing import Iterator

import torch

from harness import records as R
from harness.run.program import OutputNotComparable


class CaseFailure(Exception):
    """An exception raised inside the case, tagged with the stage it broke."""

    def __init__(self, stage: str, cause: BaseException, symptom: str | None = None):
        super().__init__(R.exception_text(cause))  # a cause whose __str__ raises is still the case's failure
        self.stage, self.cause, self.symptom = stage, cause, symptom


class NothingCompiled(Exception):
    """Dynamo produced no graph for a case that compiles: the compiled run ran eagerly."""


class NoSecondSize(Exception):
    """A dynamic run cannot make the case's second size: no dim varies, or eager rejects it."""


class InjectionMissed(Exception):
    """An injection that changed no launch: a pass would read as evidence of nothing."""


class NoEagerReference(Exception):
    """Eager's result is no reference on these inputs (not repeatable, undefined, written into overlapping memory)."""


class NothingCompared(Exception):
    """The program gave nothing to compare: no result, no mutation, no gradient."""


@contextlib.contextmanager
def timed_stage(stage: str, timings: dict[str, float], wrap: bool = True) -> Iterator[None]:
    """Time a stage into `timings`; what case code raises in it becomes a `CaseFailure` of that stage (`wrap`)."""
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


def symptom_of(exc: BaseException) -> str:
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


def traceback_text(exc: BaseException) -> str:
    """The traceback, even when the exception's message cannot be made."""
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:
        return "".join(traceback.format_tb(exc.__traceback__)) + f"{type(exc).__name__}: {R.exception_text(exc)}"


@dataclass(frozen=True)
class MemoryViolation:
    """A kernel's load or store outside every buffer its launch was given, as a device's memory checker reports it:
    an exception, anywhere in the chain of causes, whose `memory_violation` attribute is a mapping of these fields
    (the CPU surrogate's checker raises one: `tests/npu_surrogate/torch_npu/_memory_check.py`). On an NPU or a GPU
    such an access corrupts or reads other memory without a word; where a checker stops it, the run has its answer:
    the kernel is wrong, at this access."""

    kernel: str
    access: str  # "load from", "store to", "atomic update of"
    argument: str  # the kernel argument whose buffer starts nearest below the address
    offset: int  # bytes from that buffer's start
    element_bytes: int
    buffer_bytes: int
    beyond: str  # "4 bytes past its end", "8 bytes before its start"
    line: str | None = None  # the kernel's source line that made the access, where the checker knows it

    @classmethod
    def found_in(cls, exc: BaseException) -> "MemoryViolation | None":
        seen: set[int] = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            said = getattr(exc, "memory_violation", None)
            if isinstance(said, dict):
                try:
                    return cls(**{f.name: said[f.name] for f in dataclasses.fields(cls) if f.name in said})
                except TypeError:  # not the checker's fields: not an answer
                    return None
            exc = exc.__cause__ or exc.__context__
        return None

    def said(self) -> str:
        at = f" (`{self.line}`)" if self.line else ""
        return (
            f"a {self.access} a {self.element_bytes}-byte element at byte offset {self.offset} of {self.argument}, "
            f"a buffer of {self.buffer_bytes} bytes: {self.beyond}{at}"
        )
