"""A memory checker's stop, told apart: the kernel's own code, or the narrowed copy its launcher handed it.

The device's memory checker (the CPU surrogate's) stops a compiled kernel at a load or store outside the buffers
its launch was given. Where the kernel's own launcher narrows 64-bit arguments (torch_npu's
`_wrap_launcher_with_downcast`, `probe/launcher.py`), the buffer the checker names may be that launcher's copy,
not the tensor the program holds: `Tensor.to()` gives a non-dense int64 input a dense int32 copy, smaller than
the span the kernel addresses with the input's strides (seed 000's narrowing). The program is then run again
with the harness narrowing every such argument instead (keeping its layout, filled, written back: the launcher
then passes it through). Within its buffers and matching eager there, the launcher is what went wrong; the
stopped argument alone narrowed with `Tensor.to()`, as the launcher does, must stop again at the same access for
the answer to name that mechanism. Otherwise the answer stays the checker's: the kernel is wrong at that access.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness import records as R
from harness.probe.launcher import COLLAPSED, narrowed_by_harness
from harness.run.config import RunConfig
from harness.run.errors import MemoryViolation
from harness.run.sides import EagerSide, compile_kwargs


class _NotNarrowed(Exception):
    """The stopped kernel's launcher does not narrow the stopped argument."""


@dataclasses.dataclass
class _Narrowing:
    """A launch handler: each launch whose kernel's launcher narrows 64-bit arguments gets them narrowed here
    (`flaws` as `narrowed_by_harness` takes them, for the kernel named `kernel`); whether the stopped kernel
    was launched with the stopped argument among those narrowed."""

    kernel: str
    argument: str
    flaws: dict[str, str]
    saw_argument: bool = False

    def __call__(self, launch: Any) -> Any:
        info = launch.kernel
        if info.name == self.kernel:
            if self.argument not in info.launcher_narrowed:
                raise _NotNarrowed  # nothing of the launcher's to tell: the rerun stops here
            self.saw_argument = True
        if not info.launcher_narrowed:
            return launch.run()
        flaws = self.flaws if info.name == self.kernel else {}
        args, write_backs = narrowed_by_harness(launch.args, info.launcher_narrowed, info.arg_names, flaws)
        result = launch.run(args)
        for wide, narrow in write_backs:
            wide.copy_(narrow.to(wide.dtype))
        return result


def narrowing_answer(
    violation: MemoryViolation, eager_side: EagerSide, config: RunConfig, record: R.CaseResult
) -> str | None:
    """What the kernel's launcher did, where the stop is its narrowed copy's and a rerun shows it; None where the
    program was not stopped in an argument its launcher narrows, or the reruns do not show the launcher wrong."""
    from harness.inductor_compat import intercept_launches

    def rerun(flaws: dict[str, str]) -> tuple[_Narrowing, BaseException | None, Any]:
        handler = _Narrowing(violation.kernel, violation.argument, flaws)
        try:
            with intercept_launches(handler):
                session = eager_side.compiled_session(config.backend, **compile_kwargs(config, record.compile_options))
                return handler, None, session.run()
        except Exception as exc:  # noqa: BLE001 - a stop, or anything else: no answer from this rerun
            return handler, exc, None

    right, error, results = rerun({})
    if not right.saw_argument or error is not None:
        return None
    if not all(comparison.passed for comparison in eager_side.judge(results)):
        return None
    _, stopped, _ = rerun({violation.argument: COLLAPSED})
    again = MemoryViolation.found_in(stopped) if stopped is not None else None
    narrowed_right = (
        "narrowed by the harness instead (each argument keeping its layout, filled from it and written back), the "
        "program runs within its buffers and matches eager"
    )
    if again is None or (again.kernel, again.argument, again.offset) != (
        violation.kernel,
        violation.argument,
        violation.offset,
    ):
        return f"the launcher is wrong, by an effect not isolated: {narrowed_right}"
    return (
        f"launcher narrowing is wrong, not the kernel's code: the kernel's own launcher narrows {violation.argument} "
        f"with Tensor.to(), a copy of {violation.buffer_bytes} bytes the kernel still addresses with the "
        f"argument's strides (replayed so, the memory checker stops it at the same access); {narrowed_right}"
    )
