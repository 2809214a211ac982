"""A failure told apart by a rerun: the kernel's own code, or the narrowed copies its launcher handed it.

Where a kernel's own launcher narrows 64-bit arguments (torch_npu's `_wrap_launcher_with_downcast`,
`probe/launcher.py`), a run that fails may fail in the launcher, not in the kernel: `Tensor.to()` gives a
non-dense int64 input a dense int32 copy, smaller than the span the kernel addresses with the input's strides
(seed 000's narrowing). Two failures are asked about, in the run itself (no `--bisect` needed):

- a memory checker's stop (`stop_answer`) in an argument the launcher narrows: the buffer it names may be the
  launcher's copy, not the tensor the program holds;
- a divergence (`divergence_answer`) of a program whose launches narrow a 64-bit argument that is not dense.

The program is run again with the harness narrowing every such argument instead (keeping its layout, filled,
written back: the launcher then passes it through). Within its buffers and matching eager there, the launcher is
what went wrong; the arguments narrowed with `Tensor.to()` by the harness, as the launcher does, must fail again
the same way (the same stop; the same outputs diverging) for the answer to name that mechanism
(`LAUNCHER_NARROWING`, a record's `mechanism`). A stop that comes back with every layout kept is the kernel's own:
the answer is that stop, where the layout is the argument's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

from harness import records as R
from harness.inductor_compat.torch_npu_backend import LAUNCHER_NARROWING as NARROWED_TYPES, rewritten_load
from harness.layout import dtype_name, is_non_overlapping_and_dense
from harness.probe.launcher import COLLAPSED, narrowed_by_harness
from harness.run.config import RunConfig
from harness.run.errors import MemoryViolation
from harness.run.sides import EagerSide, compile_kwargs

# A record's `mechanism` where a rerun showed the launcher's `Tensor.to()` copy of a non-dense argument is what
# failed (seed 000's narrowing).
LAUNCHER_NARROWING = "launcher-narrowing"
WIDE_DTYPES = frozenset(wide for wide, _ in NARROWED_TYPES.values())


class _NotNarrowed(Exception):
    """The stopped kernel's launcher does not narrow the stopped argument."""


@dataclasses.dataclass(frozen=True)
class NarrowingFinding:
    """What a rerun showed: the answer's sentence, the mechanism it showed (None: not isolated), and, where the
    checker stopped the kernel again with every layout kept, that stop (the kernel's own code)."""

    said: str
    mechanism: str | None = None
    kept_layout_stop: MemoryViolation | None = None


@dataclasses.dataclass
class _Narrowing:
    """A launch handler: each launch whose kernel's launcher narrows 64-bit arguments gets them narrowed here,
    each keeping its layout unless `collapse(kernel, argument, tensor)` says to narrow it with `Tensor.to()` as
    the launcher does. `required` (kernel, argument): the rerun stops where that kernel is launched without
    narrowing that argument. Records the non-dense arguments narrowed, each described once."""

    collapse: Callable[[str, str, torch.Tensor], bool]
    required: tuple[str, str] | None = None
    saw_required: bool = False
    non_dense: list[str] = dataclasses.field(default_factory=list)

    def __call__(self, launch: Any) -> Any:
        info = launch.kernel
        if self.required is not None and info.name == self.required[0]:
            if self.required[1] not in info.launcher_narrowed:
                raise _NotNarrowed  # nothing of the launcher's to tell: the rerun stops here
            self.saw_required = True
        if not info.launcher_narrowed:
            return launch.run()
        flaws = {}
        for name, arg in zip(info.arg_names, launch.args):
            types = NARROWED_TYPES.get(info.launcher_narrowed.get(name, ""))
            if types is None or not isinstance(arg, torch.Tensor) or dtype_name(arg.dtype) != types[0]:
                continue
            if not is_non_overlapping_and_dense(arg):
                described = f"{name} of {info.name} ({types[0]}, size {tuple(arg.shape)} stride {tuple(arg.stride())})"
                if described not in self.non_dense:
                    self.non_dense.append(described)
            if self.collapse(info.name, name, arg):
                flaws[name] = COLLAPSED
        args, write_backs = narrowed_by_harness(launch.args, info.launcher_narrowed, info.arg_names, flaws)
        result = launch.run(args)
        for wide, narrow in write_backs:
            wide.copy_(narrow.to(wide.dtype))
        return result


def _rerun(eager_side: EagerSide, config: RunConfig, record: R.CaseResult, handler: _Narrowing) -> tuple[Any, Any]:
    """(the exception that stopped the rerun or None, its results)."""
    from harness.inductor_compat import intercept_launches

    try:
        with intercept_launches(handler):
            session = eager_side.compiled_session(config.backend, **compile_kwargs(config, record.compile_options))
            return None, session.run()
    except Exception as exc:  # noqa: BLE001 - a stop, or anything else: no answer from this rerun
        return exc, None


NARROWED_RIGHT = (
    "narrowed by the harness instead (each argument keeping its layout, filled from it and written back), the "
    "program runs within its buffers and matches eager"
)


def stop_answer(
    violation: MemoryViolation, eager_side: EagerSide, config: RunConfig, record: R.CaseResult
) -> NarrowingFinding | None:
    """What the kernel's launcher did, where the checker's stop is in an argument it narrows: what the reruns show
    (the launcher's narrowing; the kernel's own stop with every layout kept; or nothing isolated). None where the
    program was not stopped in such an argument."""
    right = _Narrowing(lambda *_: False, required=(violation.kernel, violation.argument))
    error, results = _rerun(eager_side, config, record, right)
    if not right.saw_required:
        return None
    copy = f"the stop is in {violation.argument}, the launcher's {violation.buffer_bytes}-byte narrowed copy"
    if error is not None:
        kept = MemoryViolation.found_in(error)
        if kept is None:
            return NarrowingFinding(
                f"{copy}; narrowed by the harness keeping its layout, the program raises {type(error).__name__}: "
                "no rerun isolates the launcher or the kernel"
            )
        rewritten = rewritten_load(kept.line)
        return NarrowingFinding(
            f"kernel is wrong: with every 64-bit argument narrowed by the harness keeping its layout, the memory "
            f"checker still stops {kept.kernel} at {kept.said()}"
            + (f", {rewritten[1]}" if rewritten else "")
            + f"; through its own launcher it stopped first in {violation.argument}, the launcher's "
            f"{violation.buffer_bytes}-byte narrowed copy",
            rewritten[0] if rewritten else None,
            kept,
        )
    if not all(comparison.passed for comparison in eager_side.judge(results)):
        return NarrowingFinding(
            f"{copy}; narrowed by the harness keeping its layout, the program runs within its buffers but differs "
            "from eager: no rerun isolates the launcher or the kernel"
        )
    collapsed = _Narrowing(lambda kernel, name, _: (kernel, name) == (violation.kernel, violation.argument))
    stopped, _ = _rerun(eager_side, config, record, collapsed)
    again = MemoryViolation.found_in(stopped) if stopped is not None else None
    if again is None or (again.kernel, again.argument, again.offset) != (
        violation.kernel,
        violation.argument,
        violation.offset,
    ):
        return NarrowingFinding(f"the launcher is wrong, by an effect not isolated: {NARROWED_RIGHT}")
    return NarrowingFinding(
        f"launcher narrowing is wrong, not the kernel's code: the kernel's own launcher narrows {violation.argument} "
        f"with Tensor.to(), a copy of {violation.buffer_bytes} bytes the kernel still addresses with the "
        f"argument's strides (replayed so, the memory checker stops it at the same access); {NARROWED_RIGHT}",
        LAUNCHER_NARROWING,
    )


def divergence_answer(eager_side: EagerSide, config: RunConfig, record: R.CaseResult) -> NarrowingFinding | None:
    """For a diverging run with a 64-bit tensor input on a device whose launchers may narrow (the NPU's): where the
    launches narrow a non-dense argument, and with every narrowed argument keeping its layout the program matches
    eager while those narrowed with `Tensor.to()` make the same outputs diverge, the launcher's narrowing is what
    diverges. None otherwise (the kernel's code, or a cause no rerun isolated)."""
    # (A non-dense 64-bit argument is mostly a view of a 64-bit input. A program without one is not asked, which
    # spares its divergence two reruns; a non-dense view of a 64-bit buffer the program computes goes unasked.)
    flat, _ = tree_flatten((eager_side.inputs.args, eager_side.inputs.kwargs))
    if (
        record.device != "npu"
        or config.inject
        or not any(isinstance(t, torch.Tensor) and dtype_name(t.dtype) in WIDE_DTYPES for t in flat)
    ):
        return None
    right = _Narrowing(lambda *_: False)
    error, results = _rerun(eager_side, config, record, right)
    if error is not None or not right.non_dense:
        return None
    if not all(comparison.passed for comparison in eager_side.judge(results)):
        return None
    collapsed = _Narrowing(lambda _kernel, _name, arg: not is_non_overlapping_and_dense(arg))
    error, results = _rerun(eager_side, config, record, collapsed)
    failing = sorted(c.name for c in eager_side.judge(results) if not c.passed) if error is None else None
    if failing != sorted(record.facts.failing):
        return NarrowingFinding(f"the launcher is wrong, by an effect not isolated: {NARROWED_RIGHT}")
    arguments = ", ".join(right.non_dense)
    return NarrowingFinding(
        f"launcher narrowing is wrong, not the kernel's code: the kernels' own launchers narrow {arguments}, not "
        f"dense, with Tensor.to(), a dense copy the kernel still addresses with the argument's strides (replayed "
        f"so, the same outputs diverge: {', '.join(failing[:5])}); {NARROWED_RIGHT}",
        LAUNCHER_NARROWING,
    )
