"""Stores that never land: the elements they should have written show what was there instead.

- `first-launch-dropped-stores` (triton-ascend #2292): on a kernel's first
  launch after compilation, the programs with `pid >= group_tail` write
  nothing; launched again, the same binary writes everything. A program owns
  a contiguous run of the output (Triton: `XBLOCK` elements of `xindex`; C++:
  a chunk of the outer parallel loop), so here the elements past the middle of
  each written tensor, in memory order, are never written. On the NPU
  the boundary is a count of cores (30 of 50 cells lost in the report); the
  middle keeps the boundary inside the small shapes CI runs. Replays by the
  probe are later launches: they are right.
- `masked-store-lost` (FlagTree #1245, Ascend 910B): a masked `tl.store`
  loses 2-element float32 groups (8 bytes) at random, a different set at
  every launch, more often the wider the store. Here every launch of a kernel
  with a masked store loses each aligned pair of its float32 outputs with
  probability 1/64, and at least one pair. The draws come from the operating
  system, not from the harness's seeded generators: runs differ, as on the
  NPU, while eager's do not.

What a lost store leaves: an argument the kernel reads and writes keeps its
old contents; an output-only buffer shows NaN (integers: their minimum), as a
buffer pre-filled with a sentinel does (`never_written`). A hit is a launch
in which a lost element differs from what the kernel wrote; a run without one
is `injection-missed`.
"""

from __future__ import annotations

import ast
import os
import re
from typing import Any

import torch

from harness.inductor_compat import ROLE_INOUT, Launch
from harness.layout import is_non_overlapping
from harness.records import InjectionStats

LOSS_PROBABILITY = 1 / 64
GROUP = 2  # float32 elements per lost vector group (8 bytes)


def memory_order(t: torch.Tensor) -> torch.Tensor:
    """The logical positions of `t`'s elements (row-major numbering) sorted by their address in storage."""
    offsets = torch.zeros((), dtype=torch.int64, device=t.device)
    for dim, (size, stride) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.dim()
        shape[dim] = size
        offsets = offsets + torch.arange(size, device=t.device).view(shape) * stride
    return torch.argsort(offsets.expand(t.shape).reshape(-1), stable=True)


def keep_old(written: torch.Tensor, before: torch.Tensor, lost: torch.Tensor) -> bool:
    """Put `before` back where `lost` (a flat mask in row-major order) is set; whether any value changed."""
    lost = lost.view(written.shape)
    changed = bool((lost & ~_same_bits(written, before)).any())
    if changed:
        written.copy_(torch.where(lost, before, written))
    return changed


def never_written(t: torch.Tensor) -> torch.Tensor:
    """What an output-only buffer holds where no store landed: whatever the allocator's memory held, which
    may be a previous run's correct values (a caching allocator hands the same block back). The emulation
    shows it as NaN (integers: their minimum; bool: the opposite of the value), as a buffer pre-filled with
    a sentinel shows it, so a lost store never passes by chance."""
    if t.dtype == torch.bool:
        return ~t
    if t.is_floating_point() or t.is_complex():
        return torch.full_like(t, float("nan"))
    return torch.full_like(t, torch.iinfo(t.dtype).min)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.is_floating_point() or a.is_complex():
        return (a == b) | (torch.isnan(a) & torch.isnan(b))
    return a == b


def _writable(t: torch.Tensor) -> bool:
    """Outputs whose elements have one address each: what `copy_` can write back."""
    return t.numel() > 0 and is_non_overlapping(t)


class _StaleStores:
    """Run the launch, then undo the stores of the elements `lost` chooses."""

    def __init__(self, selector: str | None = None):
        self.stats = InjectionStats(hits=[])

    def applies(self, launch: Launch) -> bool:
        raise NotImplementedError

    def lost(self, t: torch.Tensor) -> torch.Tensor | None:
        raise NotImplementedError

    def __call__(self, launch: Launch) -> Any:
        self.stats.launches += not launch.replay
        if launch.kernel.kind == "extern" or not self.applies(launch):
            return launch.run()
        outputs = [(t, launch.role(key)) for key, t in launch.written_args() if _writable(t)]
        before = [t.detach().clone() if role == ROLE_INOUT else None for t, role in outputs]
        result = launch.run()
        changed = False
        for (written, _), old in zip(outputs, before):
            lost = self.lost(written)
            if lost is not None:
                changed |= keep_old(written, never_written(written) if old is None else old, lost)
        if changed and not launch.replay:
            self.stats.hits.append(f"{launch.index}:{launch.kernel.name}")
        return result

    def missed(self) -> str | None:
        return None if self.stats.hits else self.why_missed()

    def why_missed(self) -> str:
        raise NotImplementedError


class FirstLaunchDroppedStores(_StaleStores):
    def applies(self, launch: Launch) -> bool:
        if not launch.first or launch.replay:
            return False
        if launch.autotunes:
            # The compiled binaries launched first in autotuning's benchmark, on cloned arguments.
            self.stats.autotuned_first = [*(self.stats.autotuned_first or []), f"{launch.index}:{launch.kernel.name}"]
            return False
        return True

    def lost(self, t: torch.Tensor) -> torch.Tensor | None:
        if t.numel() < 2:
            return None  # one program's worth: no program lies past the boundary
        order = memory_order(t)
        lost = torch.zeros(t.numel(), dtype=torch.bool, device=t.device)
        lost[order[(t.numel() + 1) // 2 :]] = True
        return lost

    def why_missed(self) -> str:
        autotuned = self.stats.autotuned_first or []
        after = (
            (
                f" ({len(autotuned)} first launch{'es' if len(autotuned) != 1 else ''} came after autotuning "
                f"benchmarked the kernel on cloned arguments: {', '.join(autotuned[:3])}; the binaries' first "
                "launches were the benchmark's)"
            )
            if autotuned
            else ""
        )
        return (
            f"none of the {self.stats.launches} kernel launches lost a store: no generated kernel was launched "
            "for the first time since it was loaded with an output of two elements or more whose second half "
            f"changed{after}"
        )


# A masked store: Triton `tl.store(ptr, value, mask)` with a mask other than None; C++ `vec.store(ptr, count)`.
_CPP_MASKED_STORE = re.compile(r"\.store\([^;]*,\s*static_cast<int64_t>\(")


def has_masked_store(kernel: Any) -> bool:
    source = kernel.source or ""
    if kernel.kind == "cpp":
        return bool(_CPP_MASKED_STORE.search(source))
    return any(_masked_triton_store(line) for line in source.splitlines() if "tl.store(" in line)


def _masked_triton_store(line: str) -> bool:
    try:
        call = ast.parse(line.strip()).body[0].value
    except (SyntaxError, IndexError, AttributeError):
        return False
    if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "tl.store"):
        return False
    mask = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "mask"), None)
    return mask is not None and not (isinstance(mask, ast.Constant) and mask.value is None)


class MaskedStoreLost(_StaleStores):
    def __init__(self, selector: str | None = None):
        super().__init__(selector)
        # Entropy from the system: the harness seeds torch's generators for every run, and the NPU's losses
        # are not seeded.
        self.generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        self.masked_store_kernels = 0
        self._masked: dict[int, bool] = {}  # kernel -> whether its source has a masked store (read once)

    def applies(self, launch: Launch) -> bool:
        masked = self._masked.get(id(launch.kernel))
        if masked is None:
            masked = self._masked[id(launch.kernel)] = has_masked_store(launch.kernel)
        self.masked_store_kernels += masked and not launch.replay
        return masked

    def lost(self, t: torch.Tensor) -> torch.Tensor | None:
        if t.dtype != torch.float32 or t.numel() < GROUP:
            return None
        groups = t.numel() // GROUP
        chosen = torch.rand(groups, generator=self.generator) < LOSS_PROBABILITY
        if not chosen.any():
            chosen[torch.randint(groups, (1,), generator=self.generator)] = True
        order = memory_order(t)
        lost = torch.zeros(t.numel(), dtype=torch.bool, device=t.device)
        lost[order[: groups * GROUP].view(groups, GROUP)[chosen.to(t.device)].reshape(-1)] = True
        return lost

    def why_missed(self) -> str:
        if not self.masked_store_kernels:
            return (
                f"none of the {self.stats.launches} kernel launches has a masked store (Triton "
                "`tl.store(..., mask)`, C++ `vec.store(ptr, count)`)"
            )
        return (
            f"the {self.masked_store_kernels} launches with a masked store wrote no float32 output of two "
            "elements or more whose lost pairs changed"
        )
