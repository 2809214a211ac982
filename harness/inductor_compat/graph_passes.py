"""Inductor's FX graph passes: which ones changed a program's graphs, and a compile with some of them off.

Two kinds of pass are seen, as Inductor itself names them:

- a named graph pass (`remove_noop_ops`, `reinplace_inplaceable_ops`,
  `constant_fold_uniform_value`, ...): every call of
  `GraphTransformObserver.apply_graph_pass` / `apply_gm_pass`, with the
  subsystem CompilerBisector knows it by (`joint_graph_passes`,
  `post_grad_passes`, `pre_grad_passes`);
- a pattern rewrite of a `PatternMatcherPass` (a replacement, a graph
  handler or a lowering pattern), named by its handler or its pattern name and
  by the pass it belongs to. Every entry of that name in that pass is one
  rewrite: a pattern registered several times (one entry per dtype or per
  variant of the searched graph, as the attention patterns are) is turned off
  as a whole, since with one entry refused another would make the same rewrite.

Observing records each pass that changed a graph, once, in the order they
first did, each with whether a pass inside it changed the graph too (a named
pass that runs others, `joint_graph_passes`). A pass turned off is skipped
where it would run: the named pass returns without running, the pattern
entry matches but does not apply. CompilerBisector turns passes off by how
many times a subsystem was applied, which takes a compile per halving of
every application; this turns off exactly the passes asked for.

Internals: read against torch 2.13's `torch/fx/passes/graph_transform_observer.py`
and `torch/_inductor/pattern_matcher.py` (`PatternEntry.apply`,
`PatternMatcherPass.apply`), unchanged in 2.11.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

NAMED, PATTERN = "pass", "pattern"


@dataclass(frozen=True)
class GraphPass:
    """One pass that changed a graph of the compiled program."""

    kind: str  # NAMED or PATTERN
    name: str  # Inductor's pass name, or the pattern's handler / pattern name
    subsystem: str | None  # joint_graph_passes, post_grad_passes, pre_grad_passes (None: not said)
    # What turns it off in this process: the pass name, or the pattern entry's identity.
    key: str
    # It ran other passes that changed the graph too (they are tried first).
    contains_others: bool = False
    # The nodes it created or changed (their op, target or arguments), by name, over every time it fired: what a
    # localization compares with the nodes that diverge (a cleanup that enabled a wrong rewrite touched others).
    touched: frozenset[str] = field(default=frozenset(), compare=False)
    # The nodes it erased, by what they were (`_node_facts`: op, target, arguments): what a cast that left the
    # graph is looked for in (`graphs.erases_low_precision_cast`).
    erased: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def label(self) -> str:
        where = f"{self.subsystem}: " if self.subsystem else ""
        return f"{where}{self.name}" if self.kind == NAMED else f"{where}pattern {self.name}"


@dataclass
class _State:
    fired: list[GraphPass]
    disabled: frozenset[str]
    # The (subsystem, pass name) of each PatternMatcherPass running, innermost last.
    pattern_subsystem: list[tuple[str | None, str | None]]
    depth: int = 0


_local = threading.local()
_install_lock = threading.Lock()
_installed = False


@contextlib.contextmanager
def observing_passes(disabled: frozenset[str] = frozenset()) -> Iterator[list[GraphPass]]:
    """The passes that change graphs while compiling inside this block (filled as they run); those whose key
    is in `disabled` do not run. Compiles inside must not come from a cache (a cached graph runs no pass)."""
    _install()
    state = _State([], frozenset(disabled), [])
    previous = getattr(_local, "state", None)
    _local.state = state
    try:
        yield state.fired
    finally:
        _local.state = previous


def _install() -> None:
    """Wrap the two places every pass runs through, once; outside `observing_passes` they only pass through."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from torch._inductor import pattern_matcher
        from torch.fx.passes.graph_transform_observer import GraphTransformObserver

        for method in ("apply_graph_pass", "apply_gm_pass"):
            if hasattr(GraphTransformObserver, method):
                setattr(GraphTransformObserver, method, _named_pass(getattr(GraphTransformObserver, method)))
        for entry_class in (
            pattern_matcher.LoweringPatternEntry,
            pattern_matcher.GraphPatternEntry,
            pattern_matcher.ReplacementPatternEntry,
        ):
            if "apply" in vars(entry_class):
                entry_class.apply = _pattern_entry(entry_class.apply)
        pattern_matcher.PatternMatcherPass.apply = _pattern_pass(pattern_matcher.PatternMatcherPass.apply)
        _installed = True


def left_in_lowered(passes: list[GraphPass], lowered: frozenset[str]) -> list[GraphPass]:
    """The passes with `touched` narrowed to the nodes of the graphs Inductor lowered: a cleanup whose changed
    nodes a later rewrite replaced (the nodes it matched) keeps none."""
    return [dataclasses.replace(p, touched=p.touched & lowered) for p in passes]


def _named_pass(original: Any) -> Any:
    def apply(self: Any, pass_fn: Any) -> Any:
        state: _State | None = getattr(_local, "state", None)
        if state is None:
            return original(self, pass_fn)
        key = f"{NAMED}:{self.passname}"
        if key in state.disabled:
            return None
        before, fired_before = _node_facts(self.gm.graph), len(state.fired)
        state.depth += 1
        try:
            return original(self, pass_fn)
        finally:
            state.depth -= 1
            after = _node_facts(self.gm.graph)
            if after != before:
                _note(
                    state,
                    GraphPass(
                        NAMED,
                        self.passname,
                        getattr(self, "subsystem", None),
                        key,
                        contains_others=len(state.fired) > fired_before,
                        touched=_touched(before, after),
                        erased=_erased(before, after),
                    ),
                )

    apply.__wrapped__ = original
    return apply


def _pattern_pass(original: Any) -> Any:
    def apply(self: Any, gm: Any) -> Any:
        state: _State | None = getattr(_local, "state", None)
        if state is None:
            return original(self, gm)
        state.pattern_subsystem.append((getattr(self, "subsystem", None), getattr(self, "pass_name", None)))
        try:
            return original(self, gm)
        finally:
            state.pattern_subsystem.pop()

    apply.__wrapped__ = original
    return apply


def _pattern_entry(original: Any) -> Any:
    def apply(self: Any, match: Any, graph: Any, node: Any) -> Any:
        state: _State | None = getattr(_local, "state", None)
        if state is None:
            return original(self, match, graph, node)
        subsystem, pass_name = state.pattern_subsystem[-1] if state.pattern_subsystem else (None, None)
        name = _pattern_name(self, node)
        if pass_name and pass_name != subsystem:
            name = f"{name} in {pass_name}"
        key = f"{PATTERN}:{subsystem}:{name}"  # every entry of this rewrite in this pass
        if key in state.disabled:
            return None
        before = _node_facts(graph)
        try:
            return original(self, match, graph, node)
        finally:
            after = _node_facts(graph)
            _note(
                state,
                GraphPass(
                    PATTERN, name, subsystem, key, touched=_touched(before, after), erased=_erased(before, after)
                ),
            )

    apply.__wrapped__ = original
    return apply


def _note(state: _State, graph_pass: GraphPass) -> None:
    for i, seen in enumerate(state.fired):
        if seen.key == graph_pass.key:
            state.fired[i] = dataclasses.replace(
                seen,
                contains_others=seen.contains_others or graph_pass.contains_others,
                touched=seen.touched | graph_pass.touched,
                erased=seen.erased | graph_pass.erased,
            )
            return
    state.fired.append(graph_pass)


def _pattern_name(entry: Any, node: Any) -> str:
    """The handler's qualified name (its module says which pass file registered it), else the pattern's."""
    handler = getattr(entry, "handler", None)
    if handler is not None:
        handler = getattr(handler, "func", handler)  # functools.partial
        module = getattr(handler, "__module__", "") or ""
        return f"{getattr(handler, '__qualname__', repr(handler))} ({module.rsplit('.', 1)[-1]})"
    name = getattr(entry, "pattern_name", None)
    if name:
        return str(name)
    return f"{type(entry.pattern).__name__} on {getattr(node, 'target', '?')}"


def _node_facts(graph: Any) -> dict[str, tuple[int, str]]:
    """What a pass can change, by node: its place in the order, and its op, target and arguments (reinplacing
    retargets a node in place, creating none)."""
    return {
        node.name: (position, repr((node.op, str(node.target), node.args, node.kwargs)))
        for position, node in enumerate(graph.nodes)
    }


def _touched(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> frozenset[str]:
    """The nodes a pass created or changed; one that only moved (a node erased before it) is not changed."""
    return frozenset(name for name, (_, facts) in after.items() if name not in before or before[name][1] != facts)


def _erased(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> frozenset[str]:
    """What the nodes a pass erased were (their facts)."""
    return frozenset(facts for name, (_, facts) in before.items() if name not in after)
