"""PyTorch's OpInfo database as a source of harness cases, crossed with layouts.

`cases/opinfo.py` declares the source (`opinfo_source`) with the failures
known on it. Each case is one op variant, one dtype, one OpInfo sample and one
layout (`catalog` names them), built on the CPU from seeded samples and laid
out with the harness's layout constructors (`layouts`). Cases of the `ci`
sample (about 200 runs, one case per op) have size `ci` and tag `ci`; the rest
of the sweep has size `full`. The dynamic axis: a case named `...-dynamic`,
tagged `dynamic`, runs its sample dynamically (`harness/run/dynamic.py`) when
the sample allows a second size (an input of rank 2 or more whose leading dim
is 2 or more): every contiguous case of the sweep, and one ci case in
`DYNAMIC_CI_EVERY`.

Importing this package does not import op_db: that happens when the registry
loads the source (`harness/registry/selection.py` says when) and the catalogue
is not on disk yet (`remembered`), or when a case is built.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from harness.registry import CASE_SOURCE_ORIGIN, Case, CaseSource, KnownFailure, Program
from harness.judge.tolerances import Tolerance
from harness.opinfo import catalog as C
from harness.opinfo import remembered
from harness.opinfo.layouts import LAYOUTS, REGISTRY as LAYOUT_REGISTRY

SOURCE = "opinfo"
DYNAMIC = "-dynamic"  # the name suffix of a case of the dynamic axis
DYNAMIC_CI_EVERY = 4
TAGS = ("opinfo", "ci")
INSTALL = "pip install -e '.[opinfo]'"

__all__ = ["OpFailure", "opinfo_source", "SOURCE", "LAYOUTS"]


@dataclass(frozen=True)
class OpFailure:
    """A known failure of an op's cases: which op (`name` or `name.variant`), where, and the upstream issue."""

    op: str  # EVERY_OP: a class of failure, declared by what else it names (a mechanism), on every op's cases
    issue: str
    failure: KnownFailure
    layouts: tuple[str, ...] | None = None  # None: every layout
    samples: tuple[int, ...] | None = None  # None: every sample


EVERY_OP = "*"


def unavailable() -> str | None:
    if importlib.util.find_spec("expecttest") is None:
        return f"needs the expecttest package (torch's OpInfo database imports it): {INSTALL}"
    return None


@dataclass(frozen=True)
class OpTolerance:
    """Tolerances for an op's cases of one dtype, where a decision says its differences are rounding (the reason
    goes into the case's description)."""

    op: str
    dtype: torch.dtype
    tolerance: Tolerance
    reason: str


def opinfo_source(known_failures: Sequence[OpFailure] = (), tolerances: Sequence[OpTolerance] = ()) -> CaseSource:
    failures = (tuple(known_failures), tuple(tolerances))
    return CaseSource(
        name=SOURCE,
        prefix=C.PREFIX,
        tags=TAGS,
        generate=functools.partial(_generate, failures),
        lookup=functools.partial(_lookup, failures),
        unavailable=unavailable,
        skipped=_skipped,
        prepare=C.ops_by_piece,
        description="torch's OpInfo samples (op_db), each op x dtype x sample x layout a case",
    )


def _generate(failures: tuple, include_full: bool) -> Iterable[Case]:
    # Remembered on disk once made (`remembered`): a selection then imports no op_db.
    for facts in remembered.ci_sample():
        yield make_case(facts, failures, ci=True)
        if facts.entry.name in _dynamic_ci_names():
            yield make_case(facts, failures, ci=True, dynamic=True)
    if include_full:
        for facts in remembered.full_catalogue():
            if facts.entry.name not in remembered.ci_names():
                yield make_case(facts, failures, ci=False)
            if (
                facts.entry.layout == "contiguous"
                and allows_second_size(facts)
                and facts.entry.name not in _dynamic_ci_names()
            ):
                yield make_case(facts, failures, ci=False, dynamic=True)


def allows_second_size(facts: remembered.Facts) -> bool:
    """Whether the sample has an input a dynamic run can resize: rank 2 or more, leading dim 2 or more."""
    try:
        shapes = ast.literal_eval(f"[{facts.shapes}]")
    except (ValueError, SyntaxError):  # "no tensor"
        return False
    return any(isinstance(s, tuple) and len(s) >= 2 and s[0] >= 2 for s in shapes)


@functools.cache
def _dynamic_ci_names() -> frozenset[str]:
    """The ci cases that also run dynamically: one in DYNAMIC_CI_EVERY, of those whose sample allows it."""
    return frozenset(
        f.entry.name
        for i, f in enumerate(remembered.ci_sample())
        if i % DYNAMIC_CI_EVERY == 0 and allows_second_size(f)
    )


def _lookup(failures: tuple, name: str) -> Case | None:
    if name.endswith(DYNAMIC):
        base = name.removesuffix(DYNAMIC)
        facts = remembered.find(base) or (remembered.facts_of(e) if (e := C.lookup(base)) else None)
        if facts is None or not allows_second_size(facts):
            return None
        return make_case(facts, failures, ci=base in _dynamic_ci_names(), dynamic=True)
    facts = remembered.find(name)
    if facts is None:
        entry = C.lookup(name)
        if entry is None:
            return None
        facts = remembered.facts_of(entry)
    return make_case(facts, failures, ci=name in remembered.ci_names())


def _skipped() -> list[tuple[str, str]]:
    skips: list[C.Skip] = []
    C.full_catalogue(skips)
    return [(s.what, s.reason) for s in skips]


def make_case(facts: remembered.Facts, declared: tuple, ci: bool, dynamic: bool = False) -> Case:
    """The case of one catalogue entry (`dynamic`: of its dynamic axis); `declared` is (known failures,
    tolerances) as the case module gave them."""
    failures, tolerances = declared
    entry, key = facts.entry, facts.op_key
    mine = [
        f
        for f in failures
        if f.op in (key, EVERY_OP)
        and (f.layouts is None or entry.layout in f.layouts)
        and (f.samples is None or entry.index in f.samples)
    ]
    rounding = [t for t in tolerances if t.op == key and t.dtype == entry.dtype]
    tags = ["opinfo", facts.op_name] + ([key] if key != facts.op_name else []) + [entry.layout] + (["ci"] if ci else [])
    known = tuple(f.failure for f in mine)
    if dynamic:
        tags.append("dynamic")
        # Declared on static runs: at a second size a failure may or may not show.
        known = tuple(dataclasses.replace(k, strict=False) for k in known)
    return Case(
        name=entry.name + (DYNAMIC if dynamic else ""),
        always_dynamic=dynamic,
        build=functools.partial(build, entry),
        tags=tuple(tags),
        dtypes=(entry.dtype,),
        modes=entry.modes,
        size="ci" if ci else "full",
        issue=next((f.issue for f in mine if f.op != EVERY_OP), None),
        known_failures=known,
        tolerances={t.dtype: t.tolerance for t in rounding},
        generated=True,
        description=(
            f"OpInfo {key} sample {entry.index} ({C.dtype_name(entry.dtype)}; inputs {facts.shapes}), "
            f"{entry.layout}: {LAYOUT_REGISTRY[entry.layout].summary}"
            + ("; dynamic: run at its size and at one more" if dynamic else "")
            + "".join(f"; tolerance {t.tolerance.rtol:g}/{t.tolerance.atol:g}: {t.reason}" for t in rounding)
        ),
        source=CASE_SOURCE_ORIGIN + SOURCE,
    )


def build(entry: C.Entry, dtype: torch.dtype) -> Program:
    if dtype != entry.dtype:
        raise ValueError(f"{entry.name} is a {C.dtype_name(entry.dtype)} case, not {C.dtype_name(dtype)}")
    op = C.ops_by_piece()[entry.op_piece]
    from harness.inputs import seed_for

    tensors, structure = C.laid_out(entry.op_piece, entry.dtype, entry.index, entry.layout, seed_for(entry.name))
    return Program(C.OpCall(op, structure), tensors)
