"""Is this kernel wrong, or was it handed wrong inputs? Run it again on eager values of its inputs.

The kernel is launched once more (through the injection, so an emulated or
injected fault stays in place) on fresh tensors laid out exactly as its
arguments: what it reads holds the eager values of those regions, what it
writes holds the eager state before the launch. Its outputs are then judged
by the same verdict policy:

- still diverging: the kernel is wrong;
- matching, while a read argument overlapped a written one in the real
  launch: the kernel reads what it writes (aliasing inside the kernel);
- matching, on the kernel's first launch, while everything it read held
  exactly eager's values before it ran (the probe notes it for programs that
  diverge on first launches only): the kernel is wrong on its first launch;
- matching otherwise: its inputs were already off, and it amplified that.

A kernel wrong on eager values whose own launcher narrows 64-bit arguments (torch_npu's `downcast_args`) is
replayed with the harness doing that narrowing, right and then wrong in one way at a time (`launcher.py`):
matching eager when narrowed right, the launcher is what diverges, not the kernel's code, and the answer names
the mechanism a replay reproduced (seed 000 on torch_npu's own backend: a non-dense argument's dense copy).

An argument updated in place (`in_out_ptr`) whose state before the launch
has no eager twin starts from what the launch left there. Most such kernels
write before they read (a fresh buffer, or one Inductor reused), and a second
replay from zeros shows it; a kernel whose outputs depend on that state is
not judged ("not isolated"): it would be reading its own output.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from harness.judge.compare import VerdictPolicy
from harness.judge.results import same_values
from harness.inductor_compat import Launch
from harness.inductor_compat.launches import ROLE_INOUT
from harness.layout import clone_exact, is_non_overlapping_and_dense, overlap
from harness.probe.launcher import grid_answer, launcher_answer
from harness.probe.regions import Region, RegionMap
from harness.probe.node_values import GraphValues

WRONG, ALIASING, DRIFT, NOT_ISOLATED = "wrong", "aliasing", "drift", "not-isolated"
# The buffer's layout cannot hold its node's value: elements that eager keeps apart share memory (probe.py).
LAYOUT = "layout"
# A fallback call was handed a view that holds the wrong memory while the buffer it views is right (glue.py).
GLUE = "glue"


@dataclass
class Isolation:
    kind: str  # WRONG, ALIASING, LAYOUT, DRIFT or NOT_ISOLATED
    text: str  # the record's `isolated` sentence
    # Launches whose outputs (no eager twin: a split reduction's partial sums) were recomputed on eager
    # inputs for this replay: the verdict is on them and this kernel together.
    group: list[int] = field(default_factory=list)


@dataclass
class ExactInputs:
    """A first launch whose inputs all held eager's values before it ran (probe.py), but for these arguments
    updated in place whose state did not (no eager twin, or another value: a fresh buffer the kernel writes
    before it reads it back). The isolation checks the kernel does not read their state."""

    unchecked: list[str] = field(default_factory=list)


@dataclass
class Replay:
    """A launch run again on eager values of its inputs, into fresh tensors laid out as its arguments."""

    outputs: list[tuple[str, Region, torch.Tensor]]  # (name, what it should hold, what it holds now)
    kept: list[str]  # inputs left as computed (no eager twin, no recomputation)
    group: list[int]  # earlier launches whose recomputed outputs it read
    error: str | None = None
    # Arguments updated in place whose state before the launch has no eager twin (given what it left there).
    unknown_priors: list[str] = field(default_factory=list)


# Looks up an unmapped input recomputed on eager inputs by the launch that wrote it: (launch, tensor).
Recomputed = Callable[[torch.Tensor], "tuple[int, torch.Tensor] | None"]


def replay(
    launch: Launch,
    regions: RegionMap,
    values: GraphValues,
    run: Callable[[Launch], Any],
    recomputed: Recomputed | None = None,
    zero: frozenset[str] = frozenset(),
) -> Replay:
    """Run `launch` again on eager values of its inputs (call before `regions` records this launch's writes).

    An argument updated in place whose prior state has no eager twin starts from what the launch left
    there. The written arguments named in `zero` start from zeros instead: two replays tell whether the
    kernel reads their state.
    """
    # Unchecked: checking a region computes its value, one pass each for values already let go of.
    regions_needed = [regions.read(launch, t, check=False) for _, t in launch.tensor_args()]
    regions_needed += [regions.written(launch, t, check=False) for _, t in launch.written_args()]
    values.prefetch(n for region in regions_needed for n in region.nodes())
    args, kwargs = list(launch.args), dict(launch.kwargs)
    kept: list[str] = []
    group: list[int] = []
    for key, tensor in launch.read():
        name = regions.local_of(launch, tensor) or launch.param_name(key)
        region = regions.read(launch, tensor)
        if region.input is not None:
            continue  # a graph input is the same for eager and compiled, unless written before (then a write region)
        fresh = _filled(tensor, region.eager(values) if region.mapped else None)
        if fresh is None and recomputed is not None and (found := recomputed(tensor)) is not None:
            producer, value = found
            fresh = _filled(tensor, value)
            if fresh is not None and producer not in group:
                group.append(producer)
        if fresh is None:
            kept.append(name + (f" (written by launch {region.written_by})" if region.written_by is not None else ""))
            continue
        _put(args, kwargs, key, fresh)
    outputs, unknown_priors = [], []
    # One tensor handed at several written positions (torch_npu passes a mutated input as an in_ptr it marks
    # mutated and again as the out_ptr it stores to) is one fresh tensor too: two, the replay would keep what
    # the kernel stored apart from what the launch read and wrote back.
    fresh_of: dict[tuple, torch.Tensor] = {}
    for key, tensor in launch.written_args():
        same = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tuple(tensor.stride()),
            tensor.dtype,
        )
        if same in fresh_of:
            _put(args, kwargs, key, fresh_of[same])
            continue
        written = regions.written(launch, tensor)
        prior = regions.read(launch, tensor)
        fresh = _filled(tensor, prior.eager(values) if prior.mapped else None)
        name = regions.local_of(launch, tensor) or launch.param_name(key)
        if fresh is None:
            fresh = clone_exact(tensor)  # what the launch wrote: its prior state is not known
            if launch.role(key) == ROLE_INOUT:
                unknown_priors.append(name)
        if name in zero:
            fresh.zero_()
        _put(args, kwargs, key, fresh)
        fresh_of[same] = fresh
        outputs.append((name, written, fresh))
    try:
        run(dataclasses.replace(launch, args=args, kwargs=kwargs, caller_locals={}, replay=True))
    except Exception as exc:
        return Replay(outputs, kept, group, f"{type(exc).__name__}: {exc}", unknown_priors)
    return Replay(outputs, kept, group, unknown_priors=unknown_priors)


def isolate(
    launch: Launch,
    regions: RegionMap,
    values: GraphValues,
    verdict: VerdictPolicy,
    run: Callable[[Launch], Any],
    recomputed: Recomputed | None = None,
    exact: ExactInputs | None = None,
) -> Isolation:
    """Is the kernel wrong on exact inputs, does it read what it writes, or did it amplify upstream drift?

    `exact`: for a kernel's first launch, what the probe saw before it ran: everything it read held exactly
    eager's values (None otherwise, or for a later launch). Such a launch that diverged while its replay
    matches eager is wrong on its first launch (triton-ascend #2292), not fed a drift.
    """
    again = replay(launch, regions, values, run, recomputed)
    if again.error is not None:
        return Isolation(NOT_ISOLATED, f"not isolated: the kernel could not be run again ({again.error})")
    still_wrong = _still_wrong(again.outputs, values, verdict)
    kept, group = again.kept, again.group
    if still_wrong and _reads_state_of(again.unknown_priors, launch, regions, values, run, recomputed, again):
        # In-place kernels often write a buffer before reading it back (a fresh buffer, or one Inductor reused);
        # this one reads what was there, and that state is gone: the replay read its own output instead.
        kept = kept + [
            f"{name} (updated in place; the kernel reads its state before the launch, which has no eager twin)"
            for name in again.unknown_priors
        ]
    on = "eager values of its inputs" + (f" (kept as computed: {', '.join(kept)})" if kept else "")
    if group:
        launches = ", ".join(map(str, group))
        on += f" (with the outputs of launch {launches} recomputed on eager inputs: they have no eager twin)"
    if still_wrong and kept:
        # An input without an eager twin may carry the difference: the kernel cannot be called wrong.
        return Isolation(
            NOT_ISOLATED,
            f"not isolated: on {on} it still diverges ({', '.join(still_wrong)}); "
            f"the inputs kept as computed may carry the difference",
            group,
        )
    if still_wrong and reads_what_it_writes(launch, regions):
        return Isolation(
            ALIASING,
            f"reads what it writes (aliasing inside the kernel): it updates "
            f"{', '.join(reads_what_it_writes(launch, regions))} in place and reads it through "
            f"another view; on {on} it still diverges ({', '.join(still_wrong)})",
            group,
        )
    if still_wrong:
        # What the kernel's own launcher did (its narrowing, then its grid), each told by replays of this launch.
        # (`zeroed`: its pure outputs start from zeros, so an element no program wrote shows.)
        pure_outputs = frozenset(
            regions.local_of(launch, t) or launch.param_name(k)
            for k, t in launch.written_args()
            if launch.role(k) != ROLE_INOUT
        )
        for answer in (launcher_answer, grid_answer):
            launcher = answer(
                launch,
                run,
                lambda through, zeroed=False: replay(
                    launch, regions, values, through, recomputed, pure_outputs if zeroed else frozenset()
                ),
                lambda replayed: _still_wrong(replayed.outputs, values, verdict),
            )
            if launcher is not None:
                return Isolation(WRONG, f"{launcher}; on {on} the launch diverges ({', '.join(still_wrong)})", group)
        return Isolation(WRONG, f"kernel is wrong: on {on} it still diverges ({', '.join(still_wrong)})", group)
    aliased = sorted(
        {
            regions.local_of(launch, r) or launch.param_name(k)
            for k, r in launch.read()
            for _, w in launch.written_args()
            if overlap(r, w)
        }
    )
    if aliased and _diverges_when_aliased(launch, regions, values, verdict, run, again.outputs):
        return Isolation(
            ALIASING,
            f"reads what it writes (aliasing inside the kernel): {', '.join(aliased)} is read "
            f"and written by the same launch; on {on} it diverges when they share memory "
            "as in the compiled call, and matches eager when they are apart",
            group,
        )
    if (
        exact is not None
        and not group
        and not _reads_state_of(exact.unchecked, launch, regions, values, run, recomputed, again)
    ):
        # Given exactly eager's values it diverged, and launched again on them it does not: not its inputs.
        return Isolation(
            WRONG,
            "kernel is wrong on its first launch: launched for the first time on inputs equal "
            "to eager's it diverged; launched again on them it matches eager",
        )
    return Isolation(DRIFT, f"upstream drift amplified here: on {on} this kernel matches eager", group)


def _still_wrong(
    outputs: list[tuple[str, Region, torch.Tensor]], values: GraphValues, verdict: VerdictPolicy
) -> list[str]:
    """The replayed outputs that diverge from eager, "name bad=k/n"."""
    wrong = []
    for name, region, fresh in outputs:
        expected = region.eager(values) if region.mapped else None
        if expected is None:
            continue
        comparison = verdict.tensors(name, fresh, expected, pictures=False)  # only its verdict is told
        if verdict.wants_reference(comparison) and (reference := region.float64(values)) is not None:
            comparison = verdict.tensors(name, fresh, expected, reference, pictures=False)
        if not comparison.passed:
            wrong.append(f"{name} bad={comparison.bad}/{comparison.numel}")
    return wrong


def _reads_state_of(
    names: list[str],
    launch: Launch,
    regions: RegionMap,
    values: GraphValues,
    run: Callable[[Launch], Any],
    recomputed: Recomputed | None,
    first: Replay,
) -> bool:
    """Whether the replay's outputs change when the named in-place arguments start as zeros (a kernel that
    writes them before reading them back gives the same outputs)."""
    if not names:
        return False
    again = replay(launch, regions, values, run, recomputed, zero=frozenset(names))
    return again.error is not None or not all(
        same_values(a, b) for (_, _, a), (_, _, b) in zip(first.outputs, again.outputs)
    )


def reads_what_it_writes(launch: Launch, regions: RegionMap) -> list[str]:
    """Storages this kernel updates in place while its FX nodes also read them through a view.

    A kernel computing `x.copy_(x.t() * 1.0)` in one pass reads elements it has already overwritten;
    on a GPU the order of its blocks decides the result. Seen in the FX graph: among the nodes fused
    into the kernel, a view (permute, slice, as_strided, ...) of the very node or input the kernel
    mutates.
    """
    info = regions.info
    computed = info.computed_by(launch.kernel.name)
    if computed is None:  # codegen named no buffers for it (the NPU's schedulings trace no provenance)
        computed = [
            region.buffer
            for region in (regions.written(launch, t, check=False) for _, t in launch.written_args())
            if region.buffer in info.buffers
        ]
    mutated: dict[str, str] = {}  # storage -> its own node or graph input
    for buffer in computed:
        fact = info.buffers.get(buffer)
        if fact is not None and fact.storage != fact.name and fact.view is None:
            owner = info.buffers.get(fact.storage)
            mutated[fact.storage] = owner.value_node if owner is not None and owner.value_node else fact.storage
    if not mutated:
        return []
    nodes = {n.name: n for n in info.gm.graph.nodes}
    fused = {o for buffer in computed for o in (info.buffers[buffer].origins if buffer in info.buffers else [])}
    found = []
    for storage, base in mutated.items():
        for name in fused:
            node = nodes.get(name)
            if node is not None and _is_view(node) and _base_of(node) == base and _read_as_data(node):
                found.append(storage)
                break
    return found


def _read_as_data(view: Any) -> bool:
    """Whether some user reads this view's values (not only writes through it, or takes its layout)."""
    for user in view.users:
        name = str(getattr(user.target, "__name__", user.target)).split(".")[0]
        if name in _VIEW_OPS:
            if _read_as_data(user):
                return True
            continue
        destination = user.args[0] is view if user.args else False
        schema = getattr(user.target, "_schema", None)
        writes_it = (
            destination
            and schema is not None
            and schema.arguments
            and schema.arguments[0].alias_info is not None
            and schema.arguments[0].alias_info.is_write
        )
        if not (writes_it or (destination and name == "copy")):
            return True
    return False


_VIEW_OPS = (
    "permute",
    "transpose",
    "t",
    "as_strided",
    "slice",
    "select",
    "expand",
    "diagonal",
    "unfold",
    "view",
    "reshape",
    "_reshape_alias",
    "alias",
    "squeeze",
    "unsqueeze",
)


def _is_view(node: Any) -> bool:
    name = str(getattr(node.target, "__name__", node.target)).split(".")[0]
    return (
        node.op == "call_function"
        and name in _VIEW_OPS
        and name not in ("view", "reshape", "alias", "squeeze", "unsqueeze", "_reshape_alias")
    )


def _base_of(node: Any) -> str | None:
    """The node a chain of views starts from."""
    while node is not None and node.op == "call_function" and node.args and hasattr(node.args[0], "name"):
        name = str(getattr(node.target, "__name__", node.target)).split(".")[0]
        if name not in _VIEW_OPS:
            break
        node = node.args[0]
    return getattr(node, "name", None)


def _diverges_when_aliased(
    launch: Launch,
    regions: RegionMap,
    values: GraphValues,
    verdict: VerdictPolicy,
    run: Callable[[Launch], Any],
    outputs: list[tuple[str, Region, torch.Tensor]],
) -> bool:
    """Replay with read and written arguments sharing one storage again, as in the compiled call."""
    storages: dict[int, torch.Tensor] = {}
    for _, tensor in launch.tensor_args():
        pointer = tensor.untyped_storage().data_ptr()
        if pointer not in storages:
            # The whole storage, copied; the regions the launch touches get eager values below.
            storages[pointer] = clone_exact(tensor).as_strided(
                (tensor.untyped_storage().nbytes() // tensor.element_size(),), (1,), 0
            )
    args, kwargs = list(launch.args), dict(launch.kwargs)
    fills = [(k, t, regions.read(launch, t)) for k, t in launch.read()]
    fills += [(k, t, regions.read(launch, t)) for k, t in launch.written_args()]
    for key, tensor, region in fills:
        view = storages[tensor.untyped_storage().data_ptr()].as_strided(
            tensor.shape, tensor.stride(), tensor.storage_offset()
        )
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
        if expected is not None and not verdict.tensors(name, written, expected, pictures=False).passed:
            return True
    return False


def _filled(tensor: torch.Tensor, value: torch.Tensor | None) -> torch.Tensor | None:
    """A fresh tensor laid out as `tensor` (whole storage span kept) holding `value`, when that can be done."""
    if value is None or value.shape != tensor.shape:
        return None
    fresh = clone_exact(tensor)
    return fresh if fill_in(fresh, value) else None


def fill_in(target: torch.Tensor, value: torch.Tensor) -> bool:
    """Write `value` into `target` in place, whatever its layout; False where it cannot be written (an
    overlapping view: a gapped one can be)."""
    if is_non_overlapping_and_dense(target):
        target.copy_(value)
        return True
    try:
        target.copy_(value)
    except RuntimeError:
        return False
    return True


def _put(args: list[Any], kwargs: dict[str, Any], key: int | str, value: torch.Tensor) -> None:
    if isinstance(key, str):
        kwargs[key] = value
    else:
        args[key] = value
