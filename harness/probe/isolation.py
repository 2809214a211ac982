"""Is this kernel wrong, or was it handed wrong inputs? Run it again on eager values of its inputs.

The kernel is launched once more (through the injection, so an emulated or
injected fault stays in place) on fresh tensors laid out exactly as its
arguments: what it reads holds the eager values of those regions, what it
writes holds the eager state before the launch. Its outputs are then judged
by the same verdict policy:

- still diverging: the kernel is wrong;
- matching, while a read argument overlapped a written one in the real
  launch: the kernel reads what it writes (aliasing inside the kernel);
- matching otherwise: its inputs were already off, and it amplified that.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..compare import Verdict
from ..inductor_compat import Launch
from ..layout import clone_exact, is_non_overlapping_and_dense, overlap
from .regions import RegionMap
from .values import GraphValues

WRONG, ALIASING, DRIFT, NOT_ISOLATED = "wrong", "aliasing", "drift", "not-isolated"


@dataclass
class Isolation:
    kind: str  # WRONG, ALIASING, DRIFT or NOT_ISOLATED
    text: str  # the record's `isolated` sentence


def isolate(launch: Launch, regions: RegionMap, values: GraphValues, verdict: Verdict,
            run: Callable[[Launch], Any]) -> Isolation:
    """Replay `launch` on eager values of its inputs (call before `regions` records this launch's writes)."""
    args, kwargs = list(launch.args), dict(launch.kwargs)
    kept: list[str] = []  # inputs left as computed: no eager twin, or a layout that cannot be filled
    for key, tensor in launch.read():
        name = launch.local_name(tensor) or launch.param_name(key)
        region = regions.read(launch, tensor)
        if region.input is not None:
            continue  # a graph input is the same for eager and compiled, unless written before (then a write region)
        value = region.eager(values) if region.mapped else None
        fresh = _filled(tensor, value)
        if fresh is None:
            kept.append(name + (f" (written by launch {region.written_by})" if region.written_by is not None else ""))
            continue
        _put(args, kwargs, key, fresh)
    replayed: dict[int | str, torch.Tensor] = {}
    outputs = []
    for key, tensor in launch.written_args():
        written = regions.written(launch, tensor)
        prior = regions.read(launch, tensor)
        fresh = _filled(tensor, prior.eager(values) if prior.mapped else None)
        if fresh is None:
            fresh = clone_exact(tensor)  # what the launch wrote: its prior state is not known
        _put(args, kwargs, key, fresh)
        replayed[key] = fresh
        outputs.append((launch.local_name(tensor) or launch.param_name(key), written, fresh))
    try:
        run(dataclasses.replace(launch, args=args, kwargs=kwargs, caller_locals={}, replay=True))
    except Exception as exc:
        return Isolation(NOT_ISOLATED, f"not isolated: the kernel could not be run again ({type(exc).__name__}: {exc})")
    still_wrong = []
    for name, region, fresh in outputs:
        expected = region.eager(values) if region.mapped else None
        if expected is None:
            continue
        comparison = verdict.tensors(name, fresh, expected)
        if verdict.wants_reference(comparison) and (reference := region.float64(values)) is not None:
            comparison = verdict.tensors(name, fresh, expected, reference)
        if not comparison.passed:
            still_wrong.append(f"{name} bad={comparison.bad}/{comparison.numel}")
    on = "eager values of its inputs" + (f" (kept as computed: {', '.join(kept)})" if kept else "")
    if still_wrong and kept:
        # An input without an eager twin may carry the difference: the kernel cannot be called wrong.
        return Isolation(NOT_ISOLATED, f"not isolated: on {on} it still diverges ({', '.join(still_wrong)}); "
                                       f"the inputs kept as computed may carry the difference")
    if still_wrong:
        return Isolation(WRONG, f"kernel is wrong: on {on} it still diverges ({', '.join(still_wrong)})")
    aliased = sorted({regions.local_of(launch, r) or launch.param_name(k) for k, r in launch.read()
                      for _, w in launch.written_args() if overlap(r, w)})
    if aliased and _diverges_when_aliased(launch, regions, values, verdict, run, outputs):
        return Isolation(ALIASING, f"reads what it writes (aliasing inside the kernel): {', '.join(aliased)} is read "
                                   f"and written by the same launch; on {on} it diverges when they share memory "
                                   "as in the compiled call, and matches eager when they are apart")
    return Isolation(DRIFT, f"upstream drift amplified here: on {on} this kernel matches eager")


def _diverges_when_aliased(launch: Launch, regions: RegionMap, values: GraphValues, verdict: Verdict,
                           run: Callable[[Launch], Any], outputs: list) -> bool:
    """Replay with read and written arguments sharing one storage again, as in the compiled call."""
    storages: dict[int, torch.Tensor] = {}
    for _, tensor in launch.tensor_args():
        pointer = tensor.untyped_storage().data_ptr()
        if pointer not in storages:
            # The whole storage, copied; the regions the launch touches get eager values below.
            storages[pointer] = clone_exact(tensor).as_strided((tensor.untyped_storage().nbytes() // tensor.element_size(),), (1,), 0)
    args, kwargs = list(launch.args), dict(launch.kwargs)
    fills = [(k, t, regions.read(launch, t)) for k, t in launch.read()]
    fills += [(k, t, regions.read(launch, t)) for k, t in launch.written_args()]
    for key, tensor, region in fills:
        view = storages[tensor.untyped_storage().data_ptr()].as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())
        value = region.eager(values) if region.mapped else None
        if value is not None and value.shape == view.shape:
            try:
                view.copy_(value)
            except RuntimeError:
                return False
        _put(args, kwargs, key, view)
    try:
        run(dataclasses.replace(launch, args=args, kwargs=kwargs, caller_locals={}, replay=True))
    except Exception:
        return False
    for (name, region, _), (key, _) in zip(outputs, launch.written_args()):
        expected = region.eager(values) if region.mapped else None
        written = args[key] if isinstance(key, int) else kwargs[key]
        if expected is not None and not verdict.tensors(name, written, expected).passed:
            return True
    return False


def _filled(tensor: torch.Tensor, value: torch.Tensor | None) -> torch.Tensor | None:
    """A fresh tensor laid out as `tensor` (whole storage span kept) holding `value`, when that can be done."""
    if value is None or value.shape != tensor.shape:
        return None
    fresh = clone_exact(tensor)
    if not is_non_overlapping_and_dense(fresh):
        try:
            fresh.copy_(value)  # a gapped view can be written; an overlapping one cannot
        except RuntimeError:
            return None
        return fresh
    fresh.copy_(value)
    return fresh


def _put(args: list[Any], kwargs: dict[str, Any], key: int | str, value: torch.Tensor) -> None:
    if isinstance(key, str):
        kwargs[key] = value
    else:
        args[key] = value
