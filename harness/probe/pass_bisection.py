"""Which of Inductor's FX graph passes a divergence comes from, verified by turning that pass off.

Asked once the probe has shown that the post-grad graph itself is wrong (no
kernel is to blame) and the stages before Inductor pass. One compile
observes the passes that changed the program's graphs
(`inductor_compat.graph_passes`). Then the program is compiled with some of them
turned off, half at a time, keeping the half whose absence makes the run
pass, until one pass is left: the run with that pass alone turned off
passed, so the answer is its own verification. Passes that ran other
passes (`joint_graph_passes` around its pattern rewrites) are tried only
after the passes inside them, and only if none of those is to blame. When
neither half of a set makes the run pass, no single pass is to blame, and
the answer says so.

When few passes changed the graphs (`SINGLE_OFF_MAX`), each is turned off
alone instead, one compile each: a wrong rewrite that fires only because an
earlier cleanup changed the graph (a copy removed, so that a pattern then
matches) passes with either one off, and halving stops at whichever half it
tries first. Of the passes whose absence alone makes the run pass, the one
whose change touches the nodes that diverge is the culprit; the others
enable it. With more passes, halving finds one pass whose absence makes the
run pass, and halving keeps whichever half it tries first: when that pass's
change touches none of the diverging nodes, the passes whose change does are
turned off alone too, and one that makes the run pass is the culprit, the
pass halving found its enabler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

# Compiles spent turning passes off, at most (about 2 log2 of the passes that changed the graphs).
MAX_COMPILES = 10
# Up to this many passes that changed the graphs, each is turned off alone (one compile each).
SINGLE_OFF_MAX = 8
# Beyond that, a pass found by halving whose change touches none of the diverging nodes: at most this many of the
# passes whose change does are turned off alone, to tell the rewrite it enables (one compile each).
MAX_ENABLER_CHECKS = 3


@dataclass
class PassFinding:
    """The pass to blame (None: none alone), the passes that changed the graphs, and what was shown."""

    named: object | None  # inductor_compat.graph_passes.GraphPass
    changed: list = field(default_factory=list)
    text: str = ""
    # Passes whose absence alone makes the run pass too, whose change does not touch the diverging nodes: they
    # made the graph the named one rewrote wrongly ("enables it").
    enabling: list = field(default_factory=list)


def find_pass(
    graph_passes: Callable[[], list],
    passes_without: Callable[[frozenset], bool],
    diverging: frozenset[str] = frozenset(),
) -> PassFinding:
    """`graph_passes()`: the passes that changed the graphs (one compile); `passes_without(keys)`: whether the
    program compiled with those passes off passes; `diverging`: the graph nodes whose values first diverge."""
    changed = graph_passes()
    finding = PassFinding(None, changed)
    if not changed:
        finding.text = "no Inductor graph pass changed the program's graphs"
        return finding
    spent = [0]

    def without(passes: list) -> bool:
        spent[0] += 1
        return passes_without(frozenset(p.key for p in passes))

    inner = [p for p in changed if not p.contains_others]
    outer = [p for p in changed if p.contains_others]
    if len(changed) <= SINGLE_OFF_MAX:
        return _each_alone(finding, (inner, outer), without, diverging, spent)
    for candidates in (inner, outer):
        if candidates and (named := _single(candidates, without, spent)) is not None:
            return _culprit_or_enabler(finding, named, without, diverging, spent)
    shown = ", ".join(p.label for p in changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
    finding.text = (
        f"no single Inductor graph pass is to blame: of the {len(changed)} that changed the graphs "
        f"({shown}), turning off one or a half of them left the run failing ({spent[0]} compiles)"
    )
    return finding


def _single(candidates: list, without: Callable[[list], bool], spent: list[int]) -> object | None:
    """The one pass whose absence alone makes the run pass, halving `candidates`; None when neither half of a
    set does (or the compiles run out)."""
    if len(candidates) == 1:
        return candidates[0] if without(candidates) else None
    while len(candidates) > 1 and spent[0] < MAX_COMPILES:
        half = len(candidates) // 2
        first, second = candidates[:half], candidates[half:]
        if without(first):
            candidates = first
        elif spent[0] < MAX_COMPILES and without(second):
            candidates = second
        else:
            return None
    # A single pass left came from a half of one: the run without it alone passed.
    return candidates[0] if len(candidates) == 1 else None


def _culprit_or_enabler(
    finding: PassFinding, named: object, without: Callable[[list], bool], diverging: frozenset[str], spent: list[int]
) -> PassFinding:
    """`named`'s absence alone makes the run pass (halving found it). Halving keeps whichever half it tries
    first, so a cleanup that only lets a wrong rewrite match is found as readily as the rewrite. When `named`'s
    change touches none of the diverging nodes, the passes whose change does are turned off alone too, the last
    to change the graph first (`MAX_ENABLER_CHECKS` compiles at most): the first whose absence makes the run
    pass is the culprit and `named` enables it. None doing so, `named` stays, and the answer names them."""
    changed = finding.changed
    finding.named = named
    touching = [p for p in changed if p is not named and p.touched & diverging]
    checked, culprit = [], None
    if diverging and not (named.touched & diverging):
        for other in list(reversed(touching))[:MAX_ENABLER_CHECKS]:
            checked.append(other)
            if without([other]):
                culprit = other
                break
    compiles = (
        f"{spent[0]} compile{'' if spent[0] == 1 else 's'} with passes turned off, of {len(changed)} that changed "
        "the graphs"
    )
    if culprit is None:
        finding.text = f"the run passes with that pass alone turned off ({compiles})"
        if checked:
            finding.text += (
                f"; its change touches none of the diverging nodes, and turning off alone each pass whose change "
                f"does ({', '.join(p.label for p in checked)}) left the run failing: which rewrite it enables, "
                "if any, is not told apart"
            )
        return finding
    finding.named, finding.enabling = culprit, [named]
    shown = sorted(culprit.touched & diverging)
    finding.text = (
        f"the run passes with that pass alone turned off ({compiles}); its change touches the diverging nodes "
        f"({', '.join(shown[:4])}); {named.label} enables it: the run passes with that alone off too, and its "
        "change touches none of the diverging nodes"
    )
    return finding


def _each_alone(
    finding: PassFinding,
    groups: tuple[list, list],
    without: Callable[[list], bool],
    diverging: frozenset[str],
    spent: list[int],
) -> PassFinding:
    """Each pass turned off alone (the passes inside others first). Among those whose absence alone makes the
    run pass, the culprit is the last to change the graph of those whose change touches the diverging nodes,
    else of those whose changed nodes are left in the lowered graph (a cleanup's were rewritten by the rewrite it
    let match), else of all; the others enable it."""
    changed = finding.changed
    for candidates in groups:
        alone = [p for p in candidates if without([p])]
        if not alone:
            continue
        touching = [p for p in alone if p.touched & diverging]
        kept = [p for p in alone if p.touched]  # `touched`: nodes left in the graphs Inductor lowered
        culprit = (touching or kept or alone)[-1]
        finding.named = culprit
        finding.enabling = [p for p in alone if p is not culprit]
        finding.text = (
            f"the run passes with that pass alone turned off ({spent[0]} compile"
            f"{'' if spent[0] == 1 else 's'}, each with one of the {len(changed)} passes that changed "
            "the graphs off)"
        )
        if touching:
            shown = sorted(culprit.touched & diverging)
            finding.text += f"; its change touches the diverging nodes ({', '.join(shown[:4])})"
        elif kept:
            shown = sorted(culprit.touched)
            finding.text += f"; the nodes it made or changed are in the graph Inductor lowered ({', '.join(shown[:4])})"
        if finding.enabling:
            one = len(finding.enabling) == 1
            why = (
                "its change touches none of the diverging nodes"
                if touching
                else "none of the nodes it changed is left in the graph Inductor lowered (the named pass rewrote them)"
                if kept
                else "no change could be told apart: the last pass to change the graph is named"
            )
            finding.text += (
                f"; {', '.join(p.label for p in finding.enabling)} enable{'s' if one else ''} it: the "
                f"run passes with {'that' if one else 'each'} alone off too, and {why}"
            )
        return finding
    shown = ", ".join(p.label for p in changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
    finding.text = (
        f"no single Inductor graph pass is to blame: of the {len(changed)} that changed the graphs "
        f"({shown}), turning off each alone left the run failing ({spent[0]} compiles)"
    )
    return finding
