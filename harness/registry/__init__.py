"""Cases and where they come from: `cases` (the `Case` and `Program` types, `@case`, the registry itself),
`shipped` (where the shipped cases are), `sources` and `selection` (case sources such as OpInfo, and when one
loads).

`shipped` and `selection` need no torch, and importing them must not import it: the names of `cases` are
re-exported from here on first use, as `harness` re-exports its public names.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("harness.registry.cases"), name)
