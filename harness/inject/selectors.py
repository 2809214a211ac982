"""Which launches an injection's `@SELECTOR` chooses: a launch index, a kernel-name glob, or a fallback call."""

from __future__ import annotations

import fnmatch

from harness.inductor_compat import Launch

# `@aten:N` / `@aten:GLOB` select fallback calls (ATen fallbacks, custom ops: `torch.ops.*` in the wrapper), numbered
# apart from kernel launches; every other selector selects kernel launches only.
FALLBACK_SELECTOR = "aten:"


def selects(selector: str, launch: Launch) -> bool:
    """`@SELECTOR`: a launch index counted from 0, or a kernel-name glob; `@aten:N` the N-th fallback call (from 0),
    `@aten:GLOB` fallback calls whose op (`aten.sort.stable`, `mylib.op.default`) matches the glob."""
    if selector.startswith(FALLBACK_SELECTOR):
        if launch.fallback is None:
            return False
        wanted = selector.removeprefix(FALLBACK_SELECTOR)
        if wanted.isdigit():
            return launch.fallback == int(wanted)
        return fnmatch.fnmatchcase(launch.kernel.name.removeprefix("torch.ops."), wanted)
    if launch.fallback is not None:
        return False
    if selector.isdigit():
        return launch.index == int(selector)
    return fnmatch.fnmatchcase(launch.kernel.name, selector)


def unselected(selector: str, launches: int) -> str:
    """Why `@SELECTOR` selected none of a run's `launches` launches (kernel launches, or fallback calls)."""
    if selector.startswith(FALLBACK_SELECTOR):
        wanted = selector.removeprefix(FALLBACK_SELECTOR)
        if wanted.isdigit():
            why = f"there is no fallback call {wanted}: fallback calls count from 0" + (
                f" to {launches - 1}" if launches else ""
            )
        else:
            why = f"no fallback op called is named like {wanted!r}"
        return f"@{selector} selected none of the {launches} fallback calls ({why})"
    if selector.isdigit():
        why = f"there is no launch {selector}: launches count from 0" + (f" to {launches - 1}" if launches else "")
    else:
        why = f"no kernel launched is named like {selector!r}"
    return f"@{selector} selected none of the {launches} kernel launches ({why})"
