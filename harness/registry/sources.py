"""Case sources (`registry.CaseSource`, e.g. OpInfo) for pytest and for `harness list --skipped`.

When a selection loads a source is `source_selection`'s rule.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Collection, Mapping

from harness.registry import CASE_SOURCE_ORIGIN, Case, CaseSource, Registry, load_registry
from harness.registry.selection import keyword_asks, wanted


# pytest: `CaseFile.collect` loads its module's registry through this (in the loader process,
# `harness.isolation.loader`, unless pytest runs cases in its own process).


def load_for_pytest(
    path: str,
    keyword: str | None,
    include_full: bool,
    skip: Collection[str] = (),
    on_import: Callable[[str], None] | None = None,
) -> Registry:
    """The registry of one case module, with its case sources loaded as the pytest selection asks."""
    registry = load_registry([path], include_default=False, skip=skip, on_import=on_import)
    keyword = keyword or None
    for source in registry.case_sources:
        if keyword and not keyword_asks(source, keyword):
            continue
        reason = source.unavailable()
        if reason is not None:
            # A test that skips with the reason: CI without the package says so instead of failing.
            registry.cases[f"{source.prefix}unavailable"] = unavailable_case(source, reason)
            continue
        registry.load_source(source, include_full)
    return registry


def unavailable_case(source: CaseSource, reason: str) -> Case:
    def build(dtype: Any) -> Any:
        raise RuntimeError(reason)

    return Case(
        name=f"{source.prefix}unavailable",
        build=build,
        tags=source.tags[:1],
        requires=_missing(reason),
        description=f"placeholder for the {source.name} case source: {reason}",
        source=CASE_SOURCE_ORIGIN + source.name,
    )


def _missing(reason: str) -> tuple[str, ...]:
    found = re.search(r"needs the (\S+) package", reason)
    return (found.group(1),) if found else ("__unavailable__",)


# CLI: `harness list --skipped` (the loader process answers it with this).


def skipped_by_sources(registry: Registry, request: Mapping[str, Any]) -> tuple[list | None, str | None]:
    """(what, why) pairs the selected case sources leave out (None when no source matches), or the reason one
    cannot load here."""
    known_tags = registry.known_tags()
    chosen = [
        s
        for s in registry.case_sources
        if any(n.startswith(s.prefix) for n in request["names"])
        or wanted(s, request.get("keyword"), request.get("tags", ()), True, known_tags)
    ]
    if not chosen:
        return None, None
    found: list = []
    for source in chosen:
        reason = source.unavailable()
        if reason is not None:
            return found, f"case source {source.name}: {reason}"
        found += [list(pair) for pair in source.skipped()]
    return found, None
