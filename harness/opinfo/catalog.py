"""OpInfo samples as harness cases: naming, dtypes, samples, probes, layouts, the ci sample.

One case is one op variant (OpInfo name and `variant_test_name`), one dtype,
one sample (its index in `op.sample_inputs(...)`) and one layout:

    opinfo-<op>[-<variant>]-<dtype>-s<index>-<layout>

(`.` and other non-identifier characters of OpInfo's names become `_`:
`opinfo-nn_functional_conv2d-float32-s0-gapped`,
`opinfo-max-reduction_with_dim-int64-s1-permuted`). Names are stable: they
depend only on op_db, and samples are drawn on the CPU from a generator seeded
by op and dtype, so every process (the CLI's spawned workers, pytest-xdist's)
makes the same cases with the same values.

Nothing here imports op_db until a function needs it (`op_db()`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import itertools
import random
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from harness.inputs import seed_for
from harness.layout import clone_exact, dtype_name
from harness.records import exception_line
from harness.opinfo import layouts as L
from harness.opinfo.skips import TIES, discontinuous, dtype_skip, op_key, op_skip

PREFIX = "opinfo-"
# The dtypes the issue names, wherever OpInfo declares them (on the CPU or CUDA).
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool)
# The full sweep: for every op, dtype and layout, the first SAMPLES samples (of the first DRAWN that
# OpInfo makes) that can take the layout and are a test of the compiler. OpInfo's first samples are
# often scalars, which no layout but contiguous fits; a later one of the same op usually fits them all.
# HARNESS_OPINFO_SAMPLES=N sweeps deeper (spawned workers inherit it).
SAMPLES = max(1, int(os.environ.get("HARNESS_OPINFO_SAMPLES", "1")))
DRAWN = max(16, 4 * SAMPLES)
# The ci sample: about this many runs (case x mode), one case per op, drawn with this seed.
CI_RUNS = 200
CI_SEED = 2026
_NAME = re.compile(
    r"^opinfo-(?P<op>[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)?)-(?P<dtype>[a-z0-9]+)-s(?P<index>\d+)-(?P<layout>[a-z_]+)$"
)


_DTYPE_BY_NAME = {dtype_name(d): d for d in DTYPES}


@functools.lru_cache(maxsize=1)
def op_db() -> tuple[Any, ...]:
    """OpInfo's database (imports `expecttest`; about 2-3 s)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch.testing._internal.common_methods_invocations as methods
    # As PyTorch's Inductor OpInfo test does: some ops (dropout, ...) are lambdas that reseed the global
    # generator first (`wrapper_set_seed`), which Dynamo cannot compile; random ops are skipped anyway.
    methods.wrapper_set_seed = _call
    return tuple(methods.op_db)


def _call(op: Any, *args: Any, **kwargs: Any) -> Any:
    return op(*args, **kwargs)


def _piece(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def name_piece(op: Any) -> str:
    """The op variant's part of a case name: `nn_functional_conv2d`, `max-reduction_with_dim`."""
    return _piece(op.name) + (f"-{_piece(op.variant_test_name)}" if op.variant_test_name else "")


@functools.lru_cache(maxsize=1)
def ops_by_piece() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for op in op_db():
        piece = name_piece(op)
        if piece in found:
            raise ValueError(
                f"OpInfo names {op_key(found[piece])!r} and {op_key(op)!r} make the same case name {piece!r}"
            )
        found[piece] = op
    return found


def case_name(op: Any, dtype: torch.dtype, index: int, layout: str) -> str:
    return f"{PREFIX}{name_piece(op)}-{dtype_name(dtype)}-s{index}-{layout}"


def parse_name(name: str) -> tuple[Any, torch.dtype, int, str] | None:
    """(op, dtype, sample index, layout) of a case name, or None when it names nothing OpInfo has."""
    match = _NAME.match(name)
    if match is None:
        return None
    op = ops_by_piece().get(match["op"])
    dtype = _DTYPE_BY_NAME.get(match["dtype"])
    if op is None or dtype is None or match["layout"] not in L.LAYOUTS:
        return None
    return op, dtype, int(match["index"]), match["layout"]


# Dtypes.


def declared(op: Any, device: str) -> frozenset[torch.dtype]:
    try:
        return frozenset(op.supported_dtypes(device))
    except Exception:
        return frozenset()


def dtypes_of(op: Any, cpu_only: bool = False) -> list[torch.dtype]:
    """The dtypes of DTYPES that OpInfo declares for the op (on the CPU, or on the CPU or CUDA)."""
    wanted = declared(op, "cpu") | (frozenset() if cpu_only else declared(op, "cuda"))
    return [d for d in DTYPES if d in wanted]


def grad_wanted(op: Any, dtype: torch.dtype) -> bool:
    """Whether samples are drawn with requires_grad (then training mode applies where an output has a gradient)."""
    if not (op.supports_autograd and (dtype.is_floating_point or dtype.is_complex)):
        return False
    try:
        backward = frozenset(op.supported_backward_dtypes("cpu")) | frozenset(op.supported_backward_dtypes("cuda"))
    except Exception:
        return False
    return dtype in backward


# Samples.


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Every CPU generator OpInfo's sample functions draw from, seeded, and restored afterwards."""
    state, torch_state = random.getstate(), torch.get_rng_state()
    try:
        import numpy

        numpy_state = numpy.random.get_state()
    except Exception:  # numpy is optional for torch
        numpy, numpy_state = None, None
    # The default generator directly: `torch.manual_seed` and `fork_rng` also visit every device, and cost.
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
    try:
        yield
    finally:
        random.setstate(state)
        torch.set_rng_state(torch_state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)


@functools.lru_cache(maxsize=8192)
def samples(op_piece: str, dtype: torch.dtype, count: int = DRAWN) -> tuple[Any, ...]:
    """The op's first `count` samples for `dtype`, drawn on the CPU from a generator seeded by op and dtype."""
    import warnings

    op = ops_by_piece()[op_piece]
    with _seeded(seed_for("opinfo", op_key(op), dtype_name(dtype))), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # OpInfo's own function, without `op.sample_inputs`'s wrapper: it inspects the call stack and reseeds
        # at every sample (90% of the time generation takes). One seed per op and dtype keeps values fixed.
        drawn = op.sample_inputs_func(op, "cpu", dtype, grad_wanted(op, dtype))
        return tuple(itertools.islice(iter(drawn), count))


@dataclass
class _Slot:
    """Where a tensor of the sample goes back in its (input, args, kwargs) structure."""

    index: int


def map_leaves(value: Any, leaf: Any) -> Any:
    """`value` with each leaf of its lists, tuples and dicts replaced by `leaf(it)`, in order (a torch.Size is
    a leaf)."""
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        items = [map_leaves(v, leaf) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {k: map_leaves(v, leaf) for k, v in value.items()}
    return leaf(value)


def flatten(sample: Any) -> tuple[list[torch.Tensor], Any, int]:
    """The sample's tensors (in order), its structure with slots for them, and how many belong to `input`."""
    tensors: list[torch.Tensor] = []

    def slot(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        tensors.append(value)
        return _Slot(len(tensors) - 1)

    def strip(value: Any) -> Any:
        return map_leaves(value, slot)

    structure = (strip(sample.input),)
    primary = len(tensors)
    structure += (strip(tuple(sample.args)), strip(dict(sample.kwargs)))
    return tensors, structure, primary


def fill(structure: Any, tensors: Sequence[Any]) -> Any:
    if isinstance(structure, _Slot):
        return tensors[structure.index]
    if isinstance(structure, list):
        return [fill(v, tensors) for v in structure]
    if isinstance(structure, tuple):
        return tuple(fill(v, tensors) for v in structure)
    if isinstance(structure, dict):
        return {k: fill(v, tensors) for k, v in structure.items()}
    return structure


class OpCall:
    """The program under test: the op called on the sample's structure with the case's tensors in it."""

    def __init__(self, op: Any, structure: Any):
        self.op, self.structure = op.op, structure
        self.__name__ = self.__qualname__ = f"opinfo_{_piece(op_key(op))}"

    def __call__(self, *tensors: torch.Tensor) -> Any:
        sample_input, args, kwargs = fill(self.structure, tensors)
        return self.op(sample_input, *args, **kwargs)

    def for_float64(self) -> "OpCall":
        """The float64 reference's program: floating dtypes among the arguments become float64 too (an
        `input_dtype=torch.float16` argument made the float64 run of `_softmax_backward_data` raise)."""
        twin = copy.copy(self)
        twin.structure = map_leaves(self.structure, _float_as_float64)
        return twin


def _float_as_float64(value: Any) -> Any:
    return torch.float64 if isinstance(value, torch.dtype) and value.is_floating_point else value


# Probes: what the op does with a sample, learned from one eager run on the CPU.

# ATen ops whose output is memory allocated and never written: a sample running only these has no values.
UNINITIALIZING_OPS = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)


@dataclass(frozen=True)
class Probe:
    skip: str | None = None  # why the sample is no test of the compiler
    writes: bool = False  # the op writes one of its inputs
    differentiable: bool | None = None  # an output has a gradient (None: eager failed here, not known)
    eager_error: str | None = None
    noop: bool = False  # no ATen op runs on the sample as OpInfo lays it out (x.contiguous() of a contiguous x)


class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self, storages: set[int]):
        super().__init__()
        self.storages = storages
        self.random: list[str] = []
        self.dynamic: list[str] = []
        self.writes: list[str] = []
        self.calls = 0
        self.allocations: list[str] = []  # ops that allocate without setting values
        self.initialized: list[str] = []  # every other op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls += 1
        allocates = func._overloadpacket.__name__ in UNINITIALIZING_OPS
        (self.allocations if allocates else self.initialized).append(str(func))
        tags = getattr(func, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags:
            self.random.append(str(func))
        if torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags:
            self.dynamic.append(str(func))
        for position, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = args[position] if position < len(args) else kwargs.get(argument.name)
            values = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, torch.Tensor) and _storage(v) in self.storages for v in values):
                self.writes.append(str(func))
        return func(*args, **kwargs)


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return -1


@functools.lru_cache(maxsize=65536)
def probe(op_piece: str, dtype: torch.dtype, index: int) -> Probe:
    """Run sample `index` once in eager on the CPU and record what a case needs to know about it."""
    import warnings

    op = ops_by_piece()[op_piece]
    sample = samples(op_piece, dtype)[index]
    tensors, structure, _ = flatten(sample)
    copies = [clone_exact(t) for t in tensors]
    recorder = _Recorder({_storage(t) for t in copies} - {0, -1})  # empty tensors all have address 0
    versions = [t._version for t in copies]
    try:
        with torch.enable_grad(), warnings.catch_warnings(), _seeded(0):
            warnings.simplefilter("ignore")
            with recorder:
                output = OpCall(op, structure)(*copies)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exception_line(exc, 200)}"
        skip = f"eager raises on OpInfo's sample ({text})" if dtype in declared(op, "cpu") else None
        return Probe(skip=skip, eager_error=text, writes=bool(recorder.writes))
    writes = bool(recorder.writes) or any(t._version != v for t, v in zip(copies, versions))
    if recorder.random:
        return Probe(
            skip=f"random: {recorder.random[0]} draws random numbers (nondeterministic_seeded), "
            "so eager and compiled draw different ones",
            writes=writes,
        )
    if recorder.dynamic:
        return Probe(
            skip=f"data-dependent output ({recorder.dynamic[0]}: its shape or a Python scalar depends on "
            "values): Dynamo graph-breaks there, so the op would run eagerly",
            writes=writes,
        )
    if recorder.calls and not recorder.initialized:
        # The version-proof form of OpInfo's has_nondeterministic_output, which older torch lacks for these.
        allocations = ", ".join(recorder.allocations)
        return Probe(
            skip=f"output values are undefined: the op returns uninitialized memory ({allocations})", writes=writes
        )
    leaves = torch.utils._pytree.tree_leaves(output)
    outputs = [t for t in leaves if isinstance(t, torch.Tensor)]
    if not outputs:
        kinds = sorted({type(v).__name__ for v in leaves}) or ["nothing"]
        return Probe(skip=f"returns no tensor ({', '.join(kinds)}): nothing for Inductor to compute", writes=writes)
    differentiable = any(t.requires_grad and (t.is_floating_point() or t.is_complex()) for t in outputs)
    return Probe(writes=writes, differentiable=differentiable, noop=not recorder.calls)


NOOP = "does nothing on this sample in any layout (no ATen op runs; it returns its input): nothing to compile"


@functools.lru_cache(maxsize=4096)
def does_something(op_piece: str, dtype: torch.dtype, index: int, layout: str) -> bool:
    """Whether an ATen op runs when the sample is given `layout` (for ops that do nothing on OpInfo's layout)."""
    import warnings

    op = ops_by_piece()[op_piece]
    tensors, structure = laid_out(op_piece, dtype, index, layout, 0)
    recorder = _Recorder(set())
    try:
        with torch.no_grad(), warnings.catch_warnings(), recorder:
            warnings.simplefilter("ignore")
            OpCall(op, structure)(*tensors)
    except Exception:
        return True  # the run will tell (a skip when eager rejects the inputs)
    return recorder.calls > 0


# Layouts a sample can take.


def layouts_of(op_piece: str, dtype: torch.dtype, index: int, found: Probe) -> list[str]:
    """The layouts of `layouts.LAYOUTS` this sample can be given: each must really change something."""
    tensors, _, primary = flatten(samples(op_piece, dtype)[index])
    if not tensors:
        return ["contiguous"]
    chosen = ["contiguous"]
    for layout in L.LAYOUTS[1:]:
        if layout in L.ALIASING and primary and discontinuous(ops_by_piece()[op_piece]):
            continue  # its repeated elements are ties (TIES)
        if layout in L.PRIMARY_ONLY:
            if not found.writes and primary and L.applies(layout, tensors[0]):
                chosen.append(layout)
        elif any(L.applies(layout, t) for t in tensors):
            chosen.append(layout)
    if found.noop:
        chosen = [layout for layout in chosen if does_something(op_piece, dtype, index, layout)]
    return chosen


def tie_free(t: torch.Tensor) -> torch.Tensor | None:
    """`t` with its values replaced by distinct integers in the same order (equal values ordered by position),
    centred on zero; None when its dtype cannot hold that many distinct values (bool, a small integer type)."""
    if t.numel() < 2 or t.is_complex():
        return t
    n = t.numel()
    order = torch.argsort(t.detach().reshape(-1).to(torch.float64), stable=True)
    ladder = torch.arange(n, dtype=torch.float64) - (0 if t.dtype in (torch.uint8, torch.bool) else n // 2)
    if t.is_floating_point() and ladder.to(t.dtype).to(torch.float64).unique().numel() != n:
        ladder = _distinct_floats(n, t.dtype)  # more values than the dtype has integers for (bfloat16: 256)
    values = torch.empty(n, dtype=torch.float64)
    values[order] = ladder
    made = values.to(t.dtype)
    if made.to(torch.float64).unique().numel() != n:
        return None
    return made.reshape(t.shape).requires_grad_(t.requires_grad)


def _distinct_floats(n: int, dtype: torch.dtype) -> torch.Tensor:
    """n distinct values of a float dtype, increasing, symmetric about zero: consecutive representable values
    upward from 1 (their bit patterns, counted up), and their negatives."""
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[torch.finfo(dtype).bits // 8]
    half = (n + 1) // 2
    one = torch.ones((), dtype=dtype).view(bits)
    positive = (one + torch.arange(half, dtype=torch.int64).to(bits)).view(dtype).to(torch.float64)
    return torch.cat([-positive[: n - half].flip(0), positive])


def laid_out(op_piece: str, dtype: torch.dtype, index: int, layout: str, seed: int) -> tuple[list[torch.Tensor], Any]:
    """The sample's tensors in `layout` (those that cannot take it: contiguous), and its structure. An op
    decided between equal values (`skips.DISCONTINUOUS`) gets its input without ties."""
    tensors, structure, primary = flatten(samples(op_piece, dtype)[index])
    if primary and discontinuous(ops_by_piece()[op_piece]) and (distinct := tie_free(tensors[0])) is not None:
        tensors = [distinct] + tensors[1:]
    result = []
    for position, t in enumerate(tensors):
        wanted = layout
        if layout in L.PRIMARY_ONLY and position != 0:
            wanted = "contiguous"
        if not L.applies(wanted, t):
            wanted = "contiguous"
        result.append(L.relayout(t, wanted, seed + position))
    return result, structure


# What the catalogue holds.


@dataclass(frozen=True)
class Entry:
    """One case of the catalogue: op variant, dtype, sample, layout, and the modes it runs in."""

    op_piece: str
    dtype: torch.dtype
    index: int
    layout: str
    modes: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.op_piece}-{dtype_name(self.dtype)}-s{self.index}-{self.layout}"


@dataclass(frozen=True)
class Skip:
    what: str
    reason: str


def modes_for(op: Any, dtype: torch.dtype, found: Probe) -> tuple[str, ...]:
    trainable = found.differentiable if found.differentiable is not None else grad_wanted(op, dtype)
    return ("inference", "training") if trainable and grad_wanted(op, dtype) else ("inference",)


def entries_of(op: Any, dtype: torch.dtype, skips: list[Skip] | None = None) -> list[Entry]:
    """The catalogue's cases for one op and dtype: per layout, its first SAMPLES fitting samples (skips into
    `skips`)."""
    key, piece = op_key(op), name_piece(op)
    reason = op_skip(op) or dtype_skip(op, dtype) or (TIES if discontinuous(op) and dtype == torch.bool else None)
    if reason:
        if skips is not None:
            skips.append(Skip(f"{key} {dtype_name(dtype)}", reason))
        return []
    try:
        drawn = samples(piece, dtype)
    except Exception as exc:
        if skips is not None:
            skips.append(
                Skip(
                    f"{key} {dtype_name(dtype)}",
                    f"OpInfo cannot draw samples ({type(exc).__name__}: {exception_line(exc, 200)})",
                )
            )
        return []
    usable, reasons = [], []
    for index in range(len(drawn)):
        found = probe(piece, dtype, index)
        if found.skip:
            reasons.append(f"sample {index}: {found.skip}")
        elif layouts := layouts_of(piece, dtype, index, found):
            usable.append((index, found, layouts))
        else:
            reasons.append(f"sample {index}: {NOOP}")
    if not usable:
        if skips is not None:
            what = f"{key} {dtype_name(dtype)}" + (f" (samples 0-{len(drawn) - 1})" if len(drawn) > 1 else "")
            skips.append(Skip(what, reasons[0].split(": ", 1)[1] if reasons else "OpInfo has no sample for it"))
        return []
    chosen = []
    for layout in L.LAYOUTS:
        fitting = [(index, found) for index, found, layouts in usable if layout in layouts][:SAMPLES]
        chosen += [Entry(piece, dtype, index, layout, modes_for(op, dtype, found)) for index, found in fitting]
    return sorted(chosen, key=lambda e: (e.index, L.LAYOUTS.index(e.layout)))


def full_catalogue(skips: list[Skip] | None = None) -> list[Entry]:
    """Every case of the full sweep, in op order."""
    found = []
    for piece, op in sorted(ops_by_piece().items()):
        reason = op_skip(op)
        if reason:
            if skips is not None:
                skips.append(Skip(op_key(op), reason))
            continue
        dtypes = dtypes_of(op)
        if not dtypes and skips is not None:
            skips.append(
                Skip(
                    op_key(op),
                    "declares none of float32, bfloat16, float16, int64, int32, bool (complex-only or exotic dtypes)",
                )
            )
        for dtype in dtypes:
            found.extend(entries_of(op, dtype, skips))
    return found


@functools.lru_cache(maxsize=1)
def ci_sample() -> tuple[Entry, ...]:
    """About CI_RUNS runs: ops in a seeded order, one case each (a CPU dtype; the layout used least so far)."""
    rng = random.Random(CI_SEED)
    pieces = sorted(ops_by_piece())
    rng.shuffle(pieces)
    chosen: list[Entry] = []
    used = {layout: 0 for layout in L.LAYOUTS}
    runs = 0
    for piece in pieces:
        op = ops_by_piece()[piece]
        dtypes = dtypes_of(op, cpu_only=True)
        if op_skip(op) or not dtypes:
            continue
        dtype = rng.choice(dtypes)
        candidates = entries_of(op, dtype)
        if not candidates:
            continue
        # The layout used least so far among those the sample can take (ties: LAYOUTS order).
        pick = min(candidates, key=lambda e: (used[e.layout], L.LAYOUTS.index(e.layout)))
        used[pick.layout] += 1
        chosen.append(pick)
        runs += len(pick.modes)
        if runs >= CI_RUNS:
            break
    return tuple(chosen)


def lookup(name: str) -> Entry | None:
    """The catalogue's entry with this name, made without generating any other op's cases."""
    parsed = parse_name(name)
    if parsed is None:
        return None
    op, dtype, index, layout = parsed
    if dtype not in dtypes_of(op) or index >= DRAWN:
        return None
    return next((e for e in entries_of(op, dtype) if e.index == index and e.layout == layout), None)
