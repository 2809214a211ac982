"""The catalogue's cases, remembered on disk: selecting them again does not import op_db.

Making the catalogue imports OpInfo's database and draws and probes every op's
samples: on two CPU cores about 8 s for the ci sample and 28 s for the full
sweep, paid by the harness before its first case starts, and the ci sample's
part again by every worker (to know which size a case it looks up is). What a
case needs before it runs (its entry: op, dtype, sample, layout, modes; the
op's names; the sample's shapes) depends only on torch, Python, numpy and the
catalogue's own code. Those make the file's name: another torch, or a changed
catalogue, gets a file of its own. The file lives in Inductor's cache
directory, which a run's workers share and a nightly host keeps between runs;
a worker finds the case it is sent there too (`find`), without drawing or
probing samples. An unreadable or foreign file is ignored and written again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import tempfile
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from harness.layout import dtype_named
from harness.opinfo import catalog as C

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# The code a case's entry and facts come from: this package, and the seeds and layout checks it uses.
_SOURCES = [os.path.join(_PACKAGE, name) for name in sorted(os.listdir(_PACKAGE)) if name.endswith(".py")] + [
    os.path.join(os.path.dirname(_PACKAGE), name) for name in ("inputs.py", "layout.py")
]


@dataclass(frozen=True)
class Facts:
    """A catalogue entry with what naming and describing its case needs from op_db."""

    entry: C.Entry
    op_key: str  # `name.variant`, as known failures name the op
    op_name: str
    shapes: str  # the sample's tensor shapes, for the description

    def to_dict(self) -> dict:
        e = self.entry
        return {
            "op_piece": e.op_piece,
            "dtype": C.dtype_name(e.dtype),
            "index": e.index,
            "layout": e.layout,
            "modes": list(e.modes),
            "op_key": self.op_key,
            "op_name": self.op_name,
            "shapes": self.shapes,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Facts":
        entry = C.Entry(
            data["op_piece"], dtype_named(data["dtype"]), int(data["index"]), data["layout"], tuple(data["modes"])
        )
        return cls(entry, data["op_key"], data["op_name"], data["shapes"])


def facts_of(entry: C.Entry) -> Facts:
    """An entry's facts, from op_db (imports it)."""
    op = C.ops_by_piece()[entry.op_piece]
    tensors, _, _ = C.flatten(C.samples(entry.op_piece, entry.dtype)[entry.index])
    shapes = ", ".join(str(tuple(t.shape)) for t in tensors) or "no tensor"
    return Facts(entry, C.op_key(op), op.name, shapes)


@functools.cache
def _key() -> str:
    import numpy

    parts = [
        torch.__version__,
        platform.python_version(),
        numpy.__version__,
        f"samples={C.SAMPLES} drawn={C.DRAWN} ci={C.CI_RUNS}/{C.CI_SEED}",
    ]
    digest = hashlib.sha256("\0".join(parts).encode())
    for path in _SOURCES:
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()[:24]


def path() -> str:
    from harness.inductor_compat import shared_cache_dir

    return os.path.join(shared_cache_dir(), f"harness-opinfo-catalogue-{_key()}.json")


def _read() -> dict:
    try:
        with open(path()) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) and data.get("key") == _key() else {}
    except (OSError, ValueError):
        return {}


def _write(data: dict) -> None:
    """Written whole and renamed: a reader never sees half a file (two writers: the last one's stays)."""
    target = path()
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".opinfo-catalogue-")
        with os.fdopen(handle, "w") as out:
            json.dump({**data, "key": _key()}, out)
        os.replace(temporary, target)
    except OSError:  # a read-only cache directory: the catalogue is made each time, as without this file
        pass


def _parts(data: dict, part: str) -> list[Facts] | None:
    try:
        return [Facts.from_dict(item) for item in data[part]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


@functools.cache
def _on_disk() -> dict:
    """The file as this process first read it: parsed once (about 3 MB with the full sweep), whatever asks."""
    return _read()


def _remembered(part: str, make: Callable[[], Iterable[C.Entry]]) -> tuple[Facts, ...]:
    """A part of the catalogue from the file, or made from op_db and added to it."""
    found = _parts(_on_disk(), part)
    if found is None:
        found = [facts_of(entry) for entry in make()]
        _write({**_read(), part: [f.to_dict() for f in found]})  # read again: keep what another process added
    return tuple(found)


@functools.cache
def ci_sample() -> tuple[Facts, ...]:
    """The ci sample's cases, in order."""
    return _remembered("ci", C.ci_sample)


@functools.cache
def full_catalogue() -> tuple[Facts, ...]:
    """Every case of the full sweep, in op order."""
    return _remembered("full", C.full_catalogue)


@functools.cache
def ci_names() -> frozenset[str]:
    return frozenset(f.entry.name for f in ci_sample())


@functools.cache
def _by_name() -> dict[str, Facts]:
    return {facts.entry.name: facts for part in ("ci", "full") for facts in _parts(_on_disk(), part) or ()}


def find(name: str) -> Facts | None:
    """A case's facts by name, if the file has them (a worker's lookup then probes no samples: about 10 ms a
    case on two CPU cores); None otherwise."""
    return _by_name().get(name)
