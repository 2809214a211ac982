"""Differential accuracy testing for torch.compile: compiled vs eager, element by element.

The public surface for case authors: `case`, `Case`, `Program`, `KnownFailure`,
`Tolerance` and the layout constructors of `harness.inputs` (`contiguous`,
`permuted`, `gapped`, `broadcast`, `strided`, each a `TensorSpec`). They are
imported on first use, so `harness.records` and `harness.report` work without
torch. `docs/writing-cases.md` is the guide; `help(harness.case)` and the
other docstrings say what each takes.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "Case": "registry",
    "KnownFailure": "registry",
    "Program": "registry",
    "case": "registry",
    "TensorSpec": "inputs",
    "broadcast": "inputs",
    "contiguous": "inputs",
    "gapped": "inputs",
    "permuted": "inputs",
    "strided": "inputs",
    "Tolerance": "judge.tolerances",
}

__all__ = sorted(_PUBLIC)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
