"""Whether a selection can match a case source's cases, without generating them.

A case source (`registry.CaseSource`, e.g. OpInfo) costs seconds to load
(OpInfo: importing `op_db`, then generating samples), so a selection pays for
it only when it can match its cases:

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
no `-k` collects the source's `ci` sample (CI runs it). Loading itself is
`registry.Registry.load_source`; the CLI's and pytest's uses are in `sources`.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Collection, Protocol, Sequence

# More distinct words than this in a -k expression: load rather than enumerate 2**n assignments.
MAX_WORDS = 12
_WORD = re.compile(r"[\w:+\-.\[\]\\/]+")


class SelectableSource(Protocol):
    name: str  # what a -k expression mentions to ask for it
    tags: tuple[str, ...]  # tags that ask for it


def wanted(
    source: SelectableSource, keyword: str | None, tags: Sequence[str], include_full: bool, known_tags: Collection[str]
) -> bool:
    """Whether a selection (names aside) can match the source's cases; `known_tags`: the tags of the cases
    loaded without sources (a tag none of them carries may be one of the source's, such as an op name)."""
    if tags:
        return any(t in source.tags or t not in known_tags for t in tags)
    if keyword:
        return keyword_asks(source, keyword)
    return include_full


def keyword_asks(source: SelectableSource, expression: str) -> bool:
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
