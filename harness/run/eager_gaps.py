"""A surrogate's eager gaps, told by a rerun: a failing run that the gap alone explains is a skip that names it.

A surrogate device's eager ops are another device's kernels (the CPU's), and where they are not what the device it
stands in for computes (`Device.eager_gaps`: an op whose compiler computes another form on purpose, a decomposition
that follows another device's convention), a compiled run can differ from the surrogate's eager for no fault of
the compiler. The eager side runs once more with each gap's op in the form the real device's eager op takes; where
the compiled result matches that run, and only then, the difference was the gap's, and the run tests nothing on
this device: a skip (`SurrogateGap`) that names each gap that fired and why. Where it still differs, the failure
stands as it was.
"""

from __future__ import annotations

from typing import Any, Callable

from torch.utils._python_dispatch import TorchDispatchMode

from harness.judge.sent_values import compare_results
from harness.run.errors import NoEagerReference
from harness.run.program import Session
from harness.run.sides import CompiledSide, EagerSide


class SurrogateGap(NoEagerReference):
    """The surrogate's eager is no reference for this run: a gap of its eager ops explains the difference."""


class _RealDevicesForms(TorchDispatchMode):
    """While active, each gap's op (any overload) runs in the form the real device's eager op takes; the names of
    those that ran are kept."""

    def __init__(self, gaps: dict[str, tuple[Callable[..., Any], str]]):
        super().__init__()
        self.gaps, self.fired = gaps, []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func._schema.name
        gap = self.gaps.get(name)
        if gap is None:
            return func(*args, **(kwargs or {}))
        if name not in self.fired:
            self.fired.append(name)
        return gap[0](func, args, kwargs or {})


def gap_explains(eager_side: EagerSide, compiled: CompiledSide) -> SurrogateGap | None:
    """The skip's reason where the device has eager gaps, one of them ran in this program, and with each in the
    real device's form eager gives what the compiled run gave (every output passes); None otherwise."""
    gaps = eager_side.device.eager_gaps()
    if not gaps:
        return None
    forms = _RealDevicesForms(gaps)
    session = Session(eager_side.program.fn, eager_side.inputs, eager_side.mode, eager_side.device, eager_side.seed)
    try:
        with forms:
            results = session.run()
    except Exception:  # noqa: BLE001 - a form the program cannot take (a backward refusing its dtype): no answer
        return None
    if not forms.fired:
        return None
    comparisons = compare_results(compiled.results, results, eager_side.references, eager_side.verdict)
    if not all(c.passed for c in comparisons):
        return None
    reasons: dict[str, list[str]] = {}
    for name in forms.fired:
        reasons.setdefault(gaps[name][1], []).append(name)
    said = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in reasons.items())
    return SurrogateGap(
        f"a gap of the surrogate's eager, not a compiler's fault: run with {', '.join(forms.fired)} in the form "
        f"the device it stands in for computes, eager gives what the compiled run gave ({said})"
    )
