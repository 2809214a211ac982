"""What a kernel's own launcher did to the arguments it narrows, or to its grid: each mechanism told by a replay.

torch_npu's launcher (`triton_experimental/npu_triton_heuristics.py`, 2.14.0: `_wrap_launcher_with_downcast`)
narrows each argument its codegen typed `*i64`/`*fp64` (the kernel's `downcast_args`) before the launch: an
input-only one with `Tensor.to()`, a pure output into `torch.empty_like`, an in/out or mutated one with
`Tensor.to()`, and writes every written one back with `copy_` after it. Each step can go wrong on its own:

- `collapsed`: `Tensor.to()` gives a non-dense tensor a dense copy, which the kernel still addresses with its
  compile-time strides (seed 000);
- `unfilled`: a written argument's narrowed copy is not filled from it, so a kernel that reads it reads whatever
  the buffer held;
- `not-written-back`: a written argument's narrowed copy is not written back, so what the kernel wrote is lost.

A kernel wrong on eager values of its inputs is launched again with the harness doing the narrowing, the kernel's
launcher then passing the arguments through (it converts only tensors still of the wide dtype). Right there
(each argument narrowed keeping its layout, filled, written back) and wrong through its own launcher, the
launcher is what diverges. Each mechanism is then replayed alone, one argument at a time; one that gives exactly
what the launch through the kernel's own launcher gave is what the launcher did, and the answer names it and the
argument. None giving it: the launcher is wrong by an effect no replay isolates, and the answer says so. While
these replays run, what `torch.empty` and its kin return holds one known byte pattern, so that a buffer nobody
filled holds the same thing in every replay (torch's own `fill_uninitialized_memory` covers CPU and CUDA only).

torch_npu's launcher also computes each launch's grid (`inductor_compat.torch_npu_backend.launcher_grid`). A kernel
still wrong with its arguments narrowed right is launched again on fewer programs than its launcher chose: the
vector core count its codegen divides the kernel's tiles among, then one. Matching eager there while the launcher's
own grid stays wrong, the grid is what diverges (`grid_answer`): a body whose programs past that count redo tiles of
others applies an update in place twice.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from harness.inductor_compat import Launch
from harness.inductor_compat.torch_npu_backend import LAUNCHER_NARROWING, launcher_grid, vector_core_count
from harness.judge.results import same_values
from harness.layout import dtype_name, dtype_named, extent, is_non_overlapping_and_dense

COLLAPSED, UNFILLED, NOT_WRITTEN_BACK = "collapsed", "unfilled", "not-written-back"

# What memory nobody filled holds during the replays: a poison byte, as memory debuggers use.
POISON_BYTE = 0x5A


def launcher_answer(
    launch: Launch,
    run: Callable[[Launch], Any],
    replay: Callable[[Callable[[Launch], Any]], Any],
    still_wrong: Callable[[Any], list[str]],
) -> str | None:
    """For a launch whose kernel's own launcher narrows 64-bit arguments, wrong on eager values of its inputs:
    what the launcher did, in a sentence that states only a mechanism a replay showed; None when the launch is
    as wrong with the harness narrowing right (the kernel's code is wrong).

    `run` launches a launch (through the injection, as the compiled run did); `replay(run)` launches this one
    again on eager values of its inputs through `run` (a `kernel_rerun.Replay`); `still_wrong(replayed)` lists
    the replayed outputs that diverge from eager."""
    kernel = launch.kernel
    narrowed = _narrowed_args(launch)
    if not narrowed:
        return None
    written = {key for key, _ in launch.written_args()}

    def narrowing(flaws: dict[str, str]) -> Callable[[Launch], Any]:
        def run_narrowed(replayed: Launch) -> Any:
            args, write_backs = narrowed_by_harness(replayed.args, kernel.launcher_narrowed, kernel.arg_names, flaws)
            result = run(dataclasses.replace(replayed, args=args))
            for wide, narrow in write_backs:
                wide.copy_(narrow.to(wide.dtype))
            return result

        return run_narrowed

    with _PoisonedEmpty():
        right = replay(narrowing({}))
        if right.error is not None or still_wrong(right):
            return None
        actual = replay(run)
        candidates: list[dict[str, str]] = []
        for key, name, tensor in narrowed:
            if not is_non_overlapping_and_dense(tensor):
                candidates.append({name: COLLAPSED})
            if key in written:
                candidates += [{name: UNFILLED}, {name: NOT_WRITTEN_BACK}]
        non_dense = [name for _, name, t in narrowed if not is_non_overlapping_and_dense(t)]
        if len(non_dense) > 1:
            candidates.append({name: COLLAPSED for name in non_dense})
        shown = []
        if actual.error is None:
            for flaws in candidates:
                again = replay(narrowing(flaws))
                if again.error is None and _same_outputs(again, actual):
                    shown.append(flaws)
    described = {name: f"{name} {_described(tensor)}" for _, name, tensor in narrowed}
    if not shown:
        harness_narrowed = (
            "the launcher is wrong, by an effect not isolated: narrowed by the harness instead ("
            + ", ".join(described[name] for _, name, _ in narrowed)
            + " each keeping its layout, filled from the argument and written back), the kernel matches eager; "
        )
        if actual.error is None and not still_wrong(actual):  # (the first replay, through it, diverged)
            return harness_narrowed + (
                "replayed once more through its own launcher, with memory nobody filled holding one known byte, "
                "the launch matches eager too"
            )
        return harness_narrowed + (
            "no replay of one narrowing mechanism (Tensor.to() of a non-dense argument, a copy not filled, a copy "
            "not written back) gives what the launch gave"
        )
    said = "; ".join(_mechanism(flaws, described) for flaws in shown)
    several = " (each of these replays gives what the launch gave)" if len(shown) > 1 else ""
    return f"launcher narrowing is wrong, not the kernel's code: {said}{several}"


def grid_answer(
    launch: Launch,
    run: Callable[[Launch], Any],
    replay: Callable[[Callable[[Launch], Any]], Any],
    still_wrong: Callable[[Any], list[str]],
) -> str | None:
    """For a launch wrong on eager values of its inputs whose grid its own launcher computes (torch_npu's): the
    launcher's grid, in a sentence that states what the replays showed, where launched on fewer programs (the
    vector core count its codegen divides the kernel's tiles among, then one) the kernel matches eager while on
    the launcher's grid it stays wrong; None otherwise. Arguments as for `launcher_answer`; `replay(run, True)`
    starts the launch's pure outputs from zeros."""
    autotuner = launch.kernel.autotuner
    with launcher_grid(autotuner) as grid:
        if grid is None:
            return None
        actual = replay(run)
    if not grid.seen or actual.error is not None or not still_wrong(actual):
        return None
    launched, cores = grid.seen[-1], vector_core_count()
    for programs in sorted({p for p in (cores, 1) if p and p < launched}, reverse=True):
        # Twice: as the launch left its outputs, and with its pure outputs zeroed first. Fewer programs may leave
        # tiles unwritten; there the first replay's outputs still hold what the launch wrote, which may be right.
        with launcher_grid(autotuner, programs):
            fewer = [replay(run), replay(run, True)]
        if all(each.error is None and not still_wrong(each) for each in fewer):
            among = (
                " (torch_npu's vector core count, which its body divides the work among)" if programs == cores else ""
            )
            return (
                f"launcher grid is wrong, not the kernel's code: the kernel's own launcher launches it on {launched} "
                f"programs; launched on {programs} program{'s' if programs > 1 else ''}{among}, the kernel matches "
                "eager, its outputs zeroed first or not"
            )
    return None


def _mechanism(flaws: dict[str, str], described: dict[str, str]) -> str:
    """One mechanism a replay showed, in words: the kernel's own launcher did it to these arguments."""
    (flaw,) = set(flaws.values())
    arguments = ", ".join(described[name] for name in flaws)
    if flaw == COLLAPSED:
        return (
            f"the kernel's own launcher narrows {arguments} with Tensor.to(), which gives a non-dense tensor a dense "
            "copy the kernel still addresses with its compile-time strides (replayed so, the launch gives what it "
            "gave); narrowed keeping its layout, the kernel matches eager"
        )
    if flaw == UNFILLED:
        return (
            f"the kernel's own launcher hands {arguments} to the kernel as a narrowed copy it does not fill from "
            "the argument, and the kernel reads that copy's state (replayed so, the launch gives what it gave); "
            "narrowed into a copy filled from the argument, the kernel matches eager"
        )
    return (
        f"the kernel's own launcher does not write the narrowed copy of {arguments} back after the launch, so "
        "what the kernel wrote there is lost (replayed so, the launch gives what it gave); written back, the "
        "kernel matches eager"
    )


def narrowed_by_harness(
    args: list, narrowed: dict[str, str], names: list[str], flaws: dict[str, str] | None = None
) -> tuple[list, list]:
    """`args` with each tensor the launcher narrows (`narrowed`: name -> signature type, the kernel's
    `downcast_args`) already narrowed as the seed's report asks: keeping its size, stride and offset over a narrow
    copy of its storage, filled from it, its span written back after the launch. The launcher then leaves them be.

    `flaws` (name -> mechanism) narrows those arguments as a wrong launcher would instead: `collapsed` (with
    `Tensor.to()`), `unfilled` (a copy not filled from the argument), `not-written-back`. Returns the new
    arguments and the (wide, narrow) pairs to write back after the launch, in argument order (as torch_npu's
    launcher writes them back)."""
    flaws = flaws or {}
    given, write_backs = list(args), []
    for position, name in enumerate(names[: len(given)]):
        arg, types = given[position], LAUNCHER_NARROWING.get(narrowed.get(name, ""))
        if types is None or not isinstance(arg, torch.Tensor) or arg.dtype != dtype_named(types[0]):
            continue
        narrow_dtype, flaw = dtype_named(types[1]), flaws.get(name)
        if flaw == COLLAPSED:
            wide, narrow = arg.detach(), arg.detach().to(narrow_dtype)
            given[position] = narrow
        else:
            # The whole storage narrowed, so the kernel has the bounds the argument's own storage gives it (a load
            # past the view's last element but inside its storage, such as a gap's, stays inside); the view's
            # span alone is written back.
            whole = arg.detach().as_strided((arg.untyped_storage().nbytes() // arg.element_size(),), (1,), 0)
            narrow_whole = torch.empty_like(whole, dtype=narrow_dtype) if flaw == UNFILLED else whole.to(narrow_dtype)
            given[position] = narrow_whole.as_strided(arg.shape, arg.stride(), arg.storage_offset())
            viewed = slice(arg.storage_offset(), arg.storage_offset() + extent(arg.shape, arg.stride()))
            wide, narrow = whole[viewed], narrow_whole[viewed]
        if flaw != NOT_WRITTEN_BACK:
            write_backs.append((wide, narrow))
    return given, write_backs


def _narrowed_args(launch: Launch) -> list[tuple[int | str, str, torch.Tensor]]:
    """(key, parameter name, tensor) of each argument the kernel's own launcher narrows, of the wide dtype."""
    kernel, found = launch.kernel, []
    if not kernel.launcher_narrowed:
        return found
    for key, tensor in launch.tensor_args():
        name = kernel.arg_name(key) if isinstance(key, int) else None
        types = LAUNCHER_NARROWING.get(kernel.launcher_narrowed.get(name or "", ""))
        if types is not None and dtype_name(tensor.dtype) == types[0]:
            found.append((key, name, tensor))
    return found


def _described(tensor: torch.Tensor) -> str:
    return (
        f"({dtype_name(tensor.dtype)}, size {tuple(tensor.shape)} stride {tuple(tensor.stride())}"
        f"{'' if is_non_overlapping_and_dense(tensor) else ', not dense'})"
    )


def _same_outputs(a: Any, b: Any) -> bool:
    return len(a.outputs) == len(b.outputs) and all(
        same_values(x, y) for (_, _, x), (_, _, y) in zip(a.outputs, b.outputs)
    )


class _PoisonedEmpty(TorchFunctionMode):
    """While active, what `torch.empty` and its kin return holds POISON_BYTE in every byte: a buffer nobody filled
    holds the same thing in every replay, so a replay of an unfilled copy can give exactly what the launch gave."""

    FACTORIES = frozenset(
        {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty, torch.Tensor.new_empty_strided}
    )

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if func in self.FACTORIES and isinstance(result, torch.Tensor):
            storage = result.untyped_storage()
            torch.empty(0, dtype=torch.uint8, device=result.device).set_(storage).fill_(POISON_BYTE)
        return result
