"""When a case source (`registry.CaseSource`, e.g. OpInfo) is loaded, for the CLI and for pytest.

A source costs seconds to load (OpInfo: importing `op_db`, then generating
samples), so a selection pays for it only when it can match its cases:

- explicit case names: each name with the source's prefix (`opinfo-...`) is
  looked up by itself (nothing else is generated);
- `--tag T`: T is one of the source's tags (`opinfo`, `ci`), or no case loaded
  without sources carries T (an op name: `--tag nn.functional.conv2d`);
- otherwise `-k EXPR`: EXPR mentions the source (a word containing `opinfo`,
  e.g. `-k "opinfo and softmax"`, `-k opinfo-add`) and can be true with those
  words true, or EXPR is true of a case matching none of its words
  (`-k "not slow"`); `-k seed` or `-k add` do not load it;
- otherwise `--full` alone (no names, tags or -k): the whole catalogue.

Without `--full` a source gives its `ci` sample; with it, its full sweep too.
pytest follows the same rule with its own `-k` and `--harness-full`, and with
no `-k` collects the source's `ci` sample (CI runs it).
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from .registry import CaseSource, Registry

# More distinct words than this in a -k expression: load rather than enumerate 2**n assignments.
MAX_WORDS = 12
_WORD = re.compile(r"[\w:+\-.\[\]\\/]+")


def wanted(source: "CaseSource", keyword: str | None, tags: Sequence[str], include_full: bool,
           registry: "Registry") -> bool:
    """Whether a selection (names aside) can match the source's cases (see the module docstring)."""
    if tags:
        eager_tags = {t for c in registry.cases.values() for t in c.tags}
        return any(t in source.tags or t not in eager_tags for t in tags)
    if keyword:
        return keyword_asks(source, keyword)
    return include_full


def keyword_asks(source: "CaseSource", expression: str) -> bool:
    """Whether `-k expression` can select a case of the source without knowing its cases."""
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expression)
    words = sorted({w for w in _words(compiled, expression)})
    mentions = {w for w in words if source.name.lower() in w.lower()}
    others = [w for w in words if w not in mentions]
    if not mentions:
        # Words that do not name the source are taken not to match its cases.
        return _evaluate(compiled, set())
    if len(others) > MAX_WORDS:
        return True
    for values in itertools.product((False, True), repeat=len(others)):
        true = mentions | {w for w, v in zip(others, values) if v}
        if _evaluate(compiled, true):
            return True
    return False


def _words(compiled: Any, expression: str) -> list[str]:
    code = getattr(compiled, "_code", None) or getattr(compiled, "code", None)
    if code is not None:
        return [name[1:] for name in code.co_names if name.startswith("$")]
    return [w for w in _WORD.findall(expression) if w not in ("and", "or", "not", "True", "False")]


def _evaluate(compiled: Any, true: set[str]) -> bool:
    return bool(compiled.evaluate(lambda word, **_: word in true))


# pytest: `CaseFile.collect` loads its module's registry through this.

def load_for_pytest(path: str, config: Any) -> "Registry":
    """The registry of one case module, with its case sources loaded as the pytest selection asks."""
    from .registry import load_registry

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


def unavailable_case(source: "CaseSource", reason: str):
    from .registry import Case

    def build(dtype: Any) -> Any:
        raise RuntimeError(reason)

    return Case(name=f"{source.prefix}unavailable", build=build, tags=source.tags[:1], requires=_missing(reason),
                description=f"placeholder for the {source.name} case source: {reason}", source=f"case source {source.name}")


def _missing(reason: str) -> tuple[str, ...]:
    found = re.search(r"needs the (\S+) package", reason)
    return (found.group(1),) if found else ("__unavailable__",)


# CLI: `harness list --skipped`.

def list_skipped(args: Any, say: Callable[[str], None]) -> int:
    """Print what the selected case sources leave out, and why; the CLI's exit code."""
    from .registry import load_registry

    registry = load_registry(args.case_path)
    chosen = [s for s in registry.case_sources
              if any(n.startswith(s.prefix) for n in args.cases) or wanted(s, args.keyword, args.tag, True, registry)]
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

