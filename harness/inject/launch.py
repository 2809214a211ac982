"""Emulations of launch-boundary behaviour and kernel faults, on any device.

Every generated kernel launch of the compiled run passes through one of these
handlers (see `inductor_compat.intercept_launches`), which transforms the
launch's arguments and results. Nothing here depends on how a backend
launches kernels, so results on CPU and CUDA reproduce the NPU's bug class.
Every record made under one of these carries its name in `emulation`.

- `boundary-downcast`: what torch_npu's `triton_experimental` launcher does:
  int64/float64 tensor arguments become int32/float32 through `Tensor.to()`
  (a non-dense layout collapses to a dense copy), output-only arguments get a
  fresh narrow `empty_like` buffer, written and mutated arguments are copied
  back with `copy_`. The kernel keeps its compile-time addressing. Since the
  emulated kernel still takes 64-bit pointers, narrowed values are widened
  back in the converted layout: what the kernel reads is exactly what the NPU
  kernel reads, value for value (int64 beyond 2**31 wraps, float64 rounds).
- `boundary-downcast-strided`: the fix: the conversion buffer keeps the
  argument's size, stride and offset (the whole storage span is converted),
  and arguments of one launch that share a storage (a kernel writing slices of
  a buffer it also reads, as `cat` and `block_diag` do) share one conversion
  buffer, as they share memory: converted one by one, a write through one
  would not reach a read through another, which `boundary-downcast` (the
  launcher as it is) does.
- `fault-<corruption>@<selector>`: corrupt the outputs of the launches chosen
  by launch index (`@3`) or kernel-name glob (`@*relu*`), for testing localization.
- `reduction-partial`, `reduction-axis-order` (optionally `@<selector>`):
  seed 002's NPU codegen bugs, run as rewritten kernels (`rewritten.py`).
- `first-launch-dropped-stores`, `reduction-small-inner`, `masked-load-garbage`,
  `masked-store-lost`, `half-scalar-arg`: triton-ascend's silent wrong-result
  classes (`ascend/`).

Every handler says, through `missed()`, when it changed nothing it was asked to change (a selector that
selects no launch, a rewriter that recognises no kernel, a launcher that saw no generated kernel): such a run
is an error (`injection-missed`), never a pass that looks like evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from harness.inductor_compat import ROLE_INOUT, ROLE_OUT, Launch
from harness.layout import extent, is_non_overlapping_and_dense, span
from harness.records import InjectionStats
from harness.inject.ascend import LAUNCH_CLASSES, REWRITE_CLASSES
from harness.inject.rewritten import REWRITE_INJECTIONS, RewrittenKernels
from harness.inject.selectors import FALLBACK_SELECTOR, selects, unselected

# What the NPU vector core cannot hold, and what the launcher narrows it to.
NARROWED_DTYPES = {torch.int64: torch.int32, torch.float64: torch.float32}


@dataclass(frozen=True)
class Injection:
    name: str
    summary: str
    make_handler: Callable[[str | None], Callable[[Launch], Any]]
    # Emulations that narrow precision: the runner then tells narrowing from misaddressing.
    narrows: bool = False
    needs_selector: bool = False
    takes_selector: bool = False  # an optional @selector (rewritten kernels)
    # Where the emulated behaviour was reported (`harness list --injections` shows it).
    source: str = ""
    # It acts on kernels' first launches since loading: the compiled run loads its kernels afresh first.
    first_launches: bool = False
    # It makes kernels access memory outside their buffers: only a device whose memory checker stops them may run it
    # (elsewhere the access would read or write memory no buffer owns).
    needs_memory_checker: bool = False


@dataclass
class _Converted:
    passed: torch.Tensor  # what the kernel receives: its compile-time strides over the conversion buffer
    logical: torch.Tensor  # the conversion buffer as the launcher sees it (for the write-back)


class BoundaryDowncast:
    """Narrow 64-bit tensor arguments at the launch boundary, collapsing layouts or keeping them."""

    def __init__(self, keep_layout: bool, narrowing: dict[torch.dtype, torch.dtype] | None = None):
        self.keep_layout = keep_layout
        self.narrowing = NARROWED_DTYPES if narrowing is None else narrowing
        # What reached the boundary: how many launches, arguments converted, and
        # of those, how many had a non-dense layout (the ones a collapse breaks).
        # `aliased_args`: converted arguments that share a storage with another argument of their launch.
        self.stats = InjectionStats(converted_args=0, non_dense_args=0, aliased_args=0)
        self.generated_launches = 0

    def missed(self) -> str | None:
        """The launcher's conversion applies to every generated kernel (those without 64-bit arguments keep
        theirs): it misses only when none launched."""
        if self.generated_launches:
            return None
        launched = (
            f"{self.stats.launches} launches, all library calls"
            if self.stats.launches
            else "no kernel launch at all: views, ATen fallbacks or no compiled graph"
        )
        return (
            f"no generated kernel was launched ({launched}): the launcher it emulates converts the arguments "
            "of generated kernels only"
        )

    def __call__(self, launch: Launch) -> Any:
        self.stats.launches += not launch.replay
        if launch.kernel.kind == "extern":  # library calls (mm, bmm, ...) take 64-bit types as they are
            return launch.run()
        self.generated_launches += not launch.replay
        args, write_backs = list(launch.args), []
        converted_positions = [
            p
            for p, arg in enumerate(launch.args)
            if isinstance(arg, torch.Tensor) and not (self.narrowing and arg.dtype not in self.narrowing)
        ]
        # Those the kernel's own launcher narrows (torch_npu's) are left to it: converted twice, they would not be
        # what the launcher emulated passes.
        narrowed_by_launcher = [
            p for p in converted_positions if launch.kernel.arg_name(p) in launch.kernel.launcher_narrowed
        ]
        if narrowed_by_launcher:
            converted_positions = [p for p in converted_positions if p not in narrowed_by_launcher]
            if not launch.replay:
                self.stats.launcher_narrowed = (self.stats.launcher_narrowed or []) + [
                    f"{launch.index}:{launch.kernel.name}:{launch.kernel.arg_name(p)}" for p in narrowed_by_launcher
                ]
        by_storage = _by_storage(launch.args[p] for p in converted_positions)
        shared_buffers = self._shared_buffers(by_storage) if self.keep_layout else {}
        for position in converted_positions:
            arg = launch.args[position]
            role = launch.kernel.role(position)
            # C++ kernels carry no mutated_arg_names, and a mutated graph input is
            # often passed only as an `out_ptr` (a scatter writes part of it): there
            # an output starts from the argument's contents. For a fully written
            # output, as every Triton out_ptr that is not mutated, that changes nothing.
            fresh = role == ROLE_OUT and launch.kernel.kind != "cpp"
            shared = shared_buffers.get(_storage_key(arg))
            converted = self._view_of_shared(arg, *shared) if shared else self.convert(arg, fresh=fresh)
            args[position] = converted.passed
            if not launch.replay:
                self.stats.converted_args += 1
                self.stats.non_dense_args += not is_non_overlapping_and_dense(arg)
                self.stats.aliased_args += len(by_storage.get(_storage_key(arg), ())) > 1
            if role in (ROLE_OUT, ROLE_INOUT):
                write_backs.append((arg, converted.logical))
        result = launch.run(args)
        for original, logical in write_backs:
            original.copy_(self._round_trip(logical))
        return result

    def convert(self, arg: torch.Tensor, fresh: bool) -> _Converted:
        return self._keep_layout(arg, fresh) if self.keep_layout else self._collapse(arg, fresh)

    def _collapse(self, arg: torch.Tensor, fresh: bool) -> _Converted:
        narrow = self.narrowing.get(arg.dtype, arg.dtype)
        # Exactly the launcher's calls: `.to()` and `empty_like` keep strides only
        # for non-overlapping-and-dense tensors; anything else comes back dense.
        converted = torch.zeros_like(arg, dtype=narrow) if fresh else arg.detach().to(narrow, copy=True)
        # The kernel addresses the buffer with the original strides, possibly past
        # the dense copy's end; the NPU reads whatever lies there, we read zeros.
        buffer = torch.zeros(
            max(converted.numel(), extent(arg.shape, arg.stride())), dtype=arg.dtype, device=arg.device
        )
        buffer[: converted.numel()] = converted.as_strided((converted.numel(),), (1,)).to(arg.dtype)
        return _Converted(
            buffer.as_strided(arg.shape, arg.stride()), buffer.as_strided(converted.shape, converted.stride())
        )

    def _keep_layout(self, arg: torch.Tensor, fresh: bool) -> _Converted:
        span = arg.detach().as_strided((extent(arg.shape, arg.stride()),), (1,), arg.storage_offset())
        buffer = torch.zeros_like(span) if fresh else self._round_trip(span)
        passed = buffer.as_strided(arg.shape, arg.stride())
        return _Converted(passed, passed)

    def _shared_buffers(self, by_storage: dict[tuple, list[torch.Tensor]]) -> dict[tuple, tuple[torch.Tensor, int]]:
        """Storage -> (one conversion buffer over every converted argument's span in it, its first element),
        for storages that several arguments of the launch share."""
        buffers = {}
        for key, sharers in by_storage.items():
            if len(sharers) > 1:
                spans = [span(arg) for arg in sharers]
                first, end = min(f for f, _ in spans), max(e for _, e in spans)
                whole = sharers[0].detach().as_strided((end - first,), (1,), first)
                buffers[key] = (self._round_trip(whole), first)
        return buffers

    @staticmethod
    def _view_of_shared(arg: torch.Tensor, buffer: torch.Tensor, first: int) -> _Converted:
        passed = buffer.as_strided(arg.shape, arg.stride(), arg.storage_offset() - first)
        return _Converted(passed, passed)

    def _round_trip(self, t: torch.Tensor) -> torch.Tensor:
        narrow = self.narrowing.get(t.dtype)
        return t.to(narrow).to(t.dtype) if narrow is not None else t


def _storage_key(t: torch.Tensor) -> tuple:
    return (t.device, t.untyped_storage().data_ptr(), t.dtype)


def _by_storage(args: Iterable[torch.Tensor]) -> dict[tuple, list[torch.Tensor]]:
    """Storage -> the `args` (with elements) that live in it."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for arg in args:
        if arg.numel():
            groups.setdefault(_storage_key(arg), []).append(arg)
    return groups


def _corrupt_scale(t: torch.Tensor) -> None:
    t.logical_not_() if t.dtype == torch.bool else t.mul_(2)


def _corrupt_offset(t: torch.Tensor) -> None:
    t.logical_not_() if t.dtype == torch.bool else t.add_(1)


def _corrupt_zero_tail(t: torch.Tensor) -> None:
    t.masked_fill_(_logical_positions(t) >= t.numel() // 2, 0)


def _corrupt_nan(t: torch.Tensor) -> None:
    # Integers have no NaN: their most negative value is the closest poison.
    if t.dtype == torch.bool:
        poison: float | int | bool = False
    else:
        poison = float("nan") if t.is_floating_point() else torch.iinfo(t.dtype).min
    t.masked_fill_(_logical_positions(t) == 0, poison)


def _logical_positions(t: torch.Tensor) -> torch.Tensor:
    """Each element's position in logical (row-major) order, whatever the layout."""
    return torch.arange(t.numel(), device=t.device).reshape(t.shape)


def _corrupt_ulp(t: torch.Tensor) -> None:
    """One step up: a rounding-level error, within any tolerance, for drift and amplification tests."""
    if t.is_floating_point():
        t.copy_(torch.nextafter(t, torch.full_like(t, float("inf"))))
    else:
        _corrupt_offset(t)


CORRUPTIONS: dict[str, Callable[[torch.Tensor], None]] = {
    "ulp": _corrupt_ulp,
    "scale": _corrupt_scale,
    "offset": _corrupt_offset,
    "zero-tail": _corrupt_zero_tail,
    "nan": _corrupt_nan,
}


class KernelFault:
    """Corrupt what the selected launches write (or, for stride-collapse, how they read)."""

    def __init__(self, corruption: str, selector: str):
        self.corruption = corruption
        self.selector = selector
        self.stats = InjectionStats(hits=[])
        # Fallback calls reach it only for an `@aten:` selector; `stats.launches` counts the selector's kind.
        self.handles_fallbacks = selector.startswith(FALLBACK_SELECTOR)

    def selects(self, launch: Launch) -> bool:
        return selects(self.selector, launch)

    def missed(self) -> str | None:
        return None if self.stats.hits else unselected(self.selector, self.stats.launches)

    def __call__(self, launch: Launch) -> Any:
        counted = (launch.fallback is not None) == self.handles_fallbacks and not launch.replay
        if not self.selects(launch):
            self.stats.launches += counted
            return launch.run()
        if not launch.replay:
            self.stats.launches += 1
            self.stats.hits.append(f"{launch.selector}:{launch.kernel.name}")
        if self.corruption == "stride-collapse":
            return BoundaryDowncast(keep_layout=False, narrowing={})(launch)
        if self.corruption == "store-past-end":
            return _stores_past_end(launch)
        result = launch.run()
        for _, written in launch.written():
            CORRUPTIONS[self.corruption](written)
        return result


def _stores_past_end(launch: Launch) -> Any:
    """Hand each argument the launch writes as a view one element into a buffer the size of its storage: where the
    argument reaches its storage's end (a kernel's own output does), the kernel's last store lands one element past
    the buffer's end, as in a workspace too small for what a kernel stores. A device with a memory checker (the CPU
    surrogate's) stops the launch there; on a device without one the store writes memory the buffer does not own,
    so this fault runs on a checked device only (`compiled_run`). A launch that ends has its values copied back one
    element early."""
    moved = []
    for key, tensor in launch.written_args():
        if not isinstance(key, int) or tensor.numel() == 0:
            continue
        elements = tensor.untyped_storage().nbytes() // tensor.element_size()
        whole = tensor.as_strided((elements,), (1,), 0)
        buffer = whole.clone()
        launch.args[key] = buffer[1 + tensor.storage_offset() :]
        moved.append((whole, buffer))
    result = launch.run()
    for whole, buffer in moved:
        whole[:-1].copy_(buffer[1:])
    return result


class DroppedViewOffset:
    """The wrapper's glue hands a fallback call its views at storage offset 0 (pytorch#198068, AOTInductor under
    dynamic shapes: `sym_storage_offset` lowers to 0, so a custom op's mutable view of a larger buffer writes at the
    buffer's start; a view it reads, reads there). Acts before the call, on the views the wrapper built, read or
    written: the probe sees them as the op does."""

    handles_fallbacks = True

    def __init__(self, selector: str | None):
        self.selector = selector
        self.stats = InjectionStats(hits=[])

    def missed(self) -> str | None:
        if self.stats.hits:
            return None
        if self.selector is not None:
            return unselected(self.selector, self.stats.launches)
        return (
            f"none of the {self.stats.launches} fallback calls reads or writes a view at a storage offset other "
            "than 0 (the dropped offset changes nothing there)"
        )

    def glue(self, launch: Launch) -> None:
        if launch.fallback is None or launch.glued or launch.replay:
            return
        launch.glued = True
        self.stats.launches += 1
        if self.selector is not None and not selects(self.selector, launch):
            return
        for key, tensor in launch.tensor_args():
            if isinstance(key, int) and tensor.storage_offset() and not launch.local_names(tensor):
                launch.args[key] = tensor.as_strided(tensor.shape, tensor.stride(), 0)
                self.stats.hits.append(f"{launch.selector}:{launch.kernel.name}:{launch.param_name(key)}")

    def __call__(self, launch: Launch) -> Any:
        self.glue(launch)
        return launch.run()


def _fault(corruption: str) -> Injection:
    described = {
        "ulp": "moves one ulp up (integers: adds 1 to)",
        "scale": "doubles",
        "offset": "adds 1 to",
        "zero-tail": "zeroes the second half of",
        "nan": "puts a NaN (integers: their minimum) in the first element of",
        "stride-collapse": "hands dense copies of its tensor arguments (compile-time strides kept) to",
        "store-past-end": "hands its written arguments one element into buffers of their size (the last store lands "
        "past the end: for a device with a memory checker, as the CPU surrogate's) to",
    }[corruption]
    return Injection(
        name=f"fault-{corruption}",
        summary=f"{described} the outputs of the selected kernel launches"
        if corruption not in ("stride-collapse", "store-past-end")
        else f"{described} the selected kernel launches",
        make_handler=lambda selector: KernelFault(corruption, selector or ""),
        needs_selector=True,
        needs_memory_checker=corruption == "store-past-end",
    )


INJECTIONS: dict[str, Injection] = {
    "boundary-downcast": Injection(
        "boundary-downcast",
        "emulates the NPU triton_experimental launcher: int64/float64 args narrowed with Tensor.to() "
        "(layouts collapse)",
        lambda _: BoundaryDowncast(keep_layout=False),
        narrows=True,
        source="seed 000 (torch_npu Longformer report)",
    ),
    "boundary-downcast-strided": Injection(
        "boundary-downcast-strided",
        "the proposed fix: int64/float64 args narrowed into buffers that keep size, stride and offset",
        lambda _: BoundaryDowncast(keep_layout=True),
        narrows=True,
    ),
    **{f"fault-{c}": _fault(c) for c in (*CORRUPTIONS, "stride-collapse", "store-past-end")},
    "glue-offset-dropped": Injection(
        "glue-offset-dropped",
        "emulates the wrapper handing a fallback or custom op its views (read or written) at storage offset 0",
        DroppedViewOffset,
        takes_selector=True,
        source="pytorch#198068 (AOTInductor, dynamic shapes)",
    ),
}


def parse_injection(text: str) -> tuple[Injection, str | None]:
    """`NAME` or `NAME@SELECTOR` (a launch index counted from 0, a kernel-name glob, or `aten:N` / `aten:GLOB`)."""
    name, _, selector = text.partition("@")
    injection = injection_named(name)
    if injection.needs_selector and not selector:
        raise ValueError(
            f"{name} needs a kernel: {name}@LAUNCH_INDEX, {name}@NAME_GLOB, or a fallback call: "
            f"{name}@aten:N or {name}@aten:OP_GLOB"
        )
    if selector and not (injection.needs_selector or injection.takes_selector):
        raise ValueError(f"{name} applies to every launch and takes no @selector")
    if (
        selector
        and selector.startswith(FALLBACK_SELECTOR)
        and not (
            (name.startswith("fault-") and name not in ("fault-stride-collapse", "fault-store-past-end"))
            or name == "glue-offset-dropped"
        )
    ):
        raise ValueError(
            f"{name} acts on generated kernels: @{selector} selects fallback calls, which only the "
            "fault-* corruptions (not stride-collapse or store-past-end) take"
        )
    return injection, selector or None


def _catalog():
    from harness.extensions import INJECTION_GROUP, Catalog

    return Catalog("injection", INJECTION_GROUP, INJECTIONS, lambda found: isinstance(found, Injection))


def injection_names() -> list[str]:
    """The built-in injections, then those other packages declare (entry points "harness.injections")."""
    return _catalog().names()


def injection_named(name: str) -> Injection:
    """A built-in injection or one from an entry point; ValueError naming the choices otherwise."""
    return _catalog().get(name)


def make_handler(text: str) -> Callable[[Launch], Any]:
    """The launch handler for `--inject TEXT`; it exposes what it saw in `.stats`."""
    injection, selector = parse_injection(text)
    return injection.make_handler(selector)


# --- Rewritten kernels (seed 002's reduction bugs): harness/inject/rewritten.py -----------------
INJECTIONS.update(
    {
        name: Injection(
            name,
            summary,
            lambda selector, name=name: RewrittenKernels(name, selector),
            takes_selector=True,
            source="seed 002 (torch_npu RMSNorm report)",
        )
        for name, summary in REWRITE_INJECTIONS.items()
    }
)


# --- triton-ascend's silent wrong-result classes: harness/inject/ascend/ ----------------------------
INJECTIONS.update(
    {
        name: Injection(name, summary, handler, source=source, first_launches=name == "first-launch-dropped-stores")
        for name, (handler, summary, source) in LAUNCH_CLASSES.items()
    }
)
INJECTIONS.update(
    {
        name: Injection(
            name,
            summary,
            lambda selector, name=name: RewrittenKernels(name, selector),
            takes_selector=True,
            source=source,
        )
        for name, (summary, source) in REWRITE_CLASSES.items()
    }
)
