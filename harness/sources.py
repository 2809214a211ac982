"""Case sources (`registry.CaseSource`, e.g. OpInfo) for pytest and for `harness list --skipped`.

When a selection loads a source is `source_selection`'s rule.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from .registry import CASE_SOURCE_ORIGIN, Case, CaseSource, Registry, load_registry
from .source_selection import keyword_asks, wanted


# pytest: `CaseFile.collect` loads its module's registry through this.

def load_for_pytest(path: str, config: Any) -> Registry:
    """The registry of one case module, with its case sources loaded as the pytest selection asks."""
    registry = load_registry([path], include_default=False)
    keyword = config.getoption("keyword", None) or None
    include_full = bool(config.getoption("full", False))
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

    return Case(name=f"{source.prefix}unavailable", build=build, tags=source.tags[:1], requires=_missing(reason),
                description=f"placeholder for the {source.name} case source: {reason}",
                source=CASE_SOURCE_ORIGIN + source.name)


def _missing(reason: str) -> tuple[str, ...]:
    found = re.search(r"needs the (\S+) package", reason)
    return (found.group(1),) if found else ("__unavailable__",)


# CLI: `harness list --skipped`.

def list_skipped(args: Any, say: Callable[[str], None]) -> int:
    """Print what the selected case sources leave out, and why; the CLI's exit code."""
    registry = load_registry(args.case_path)
    known_tags = registry.known_tags()
    chosen = [s for s in registry.case_sources
              if any(n.startswith(s.prefix) for n in args.cases) or wanted(s, args.keyword, args.tag, True, known_tags)]
    if not chosen:
        say("no case source matches the selection (try --tag opinfo)")
        return 0
    count = 0
    say(f"{'SKIPPED':60} REASON")
    for source in chosen:
        reason = source.unavailable()
        if reason is not None:
            say(f"error: case source {source.name}: {reason}")
            return 2
        for what, why in source.skipped():
            count += 1
            say(f"{what:60} {why}")
    say(f"{count} skipped")
    return 0

