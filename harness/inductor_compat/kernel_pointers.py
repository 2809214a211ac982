"""What a Triton kernel's source does with each of its arguments: which it stores to, loads from, or never uses.

Inductor's parameter names say the roles (`in_ptr*`, `out_ptr*`, `in_out_ptr*`), but not every backend's
kernels follow them: torch_npu 2.14's rsplit partial kernels (`triton_experimental`,
`npu_rsplit_partial` in their inductor_meta) take `(in_ptr0, out_ptr0, ws_ptr, ...)`, store their partial sums
to `ws_ptr` (a workspace the wrapper allocates) and never touch `out_ptr0`; the combine kernel then reads
the workspace as `in_ptr0`. Read by names alone, the partial kernel writes the result buffer it never writes,
and the workspace is a scalar no launch writes.

The body is read with `ast`, not regular expressions: a pointer reaches `tl.store` through arithmetic
(`ws_ptr + (rsplit_id * (4)) + (x0)`), through locals (`tl.make_block_ptr(base=out_ptr0, ...)` assigned,
then stored to), or as a tensor descriptor whose `.store(...)` method writes (`tl.make_tensor_descriptor`).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

# Calls whose first argument (or `pointer=`) is written: `tl.store` and Triton's atomics.
_WRITES = frozenset(
    {
        "store",
        "atomic_add",
        "atomic_and",
        "atomic_cas",
        "atomic_max",
        "atomic_min",
        "atomic_or",
        "atomic_xchg",
        "atomic_xor",
    }
)
_READS = frozenset({"load"})


@dataclass(frozen=True)
class PointerUse:
    stored: frozenset[str]  # arguments written through (tl.store, atomics, a descriptor's .store)
    loaded: frozenset[str]  # arguments read through (tl.load, a descriptor's .load)
    used: frozenset[str]  # arguments the body names at all
    atomic_added: frozenset[str] = frozenset()  # arguments written through tl.atomic_add (a sum in memory)


def pointer_use(source: str, kernel_name: str, arg_names: list[str]) -> PointerUse | None:
    """How the `@triton.jit` function `kernel_name` in `source` uses `arg_names` (its pointer arguments: a
    scalar in an index, `out_ptr0 + ks0*x1`, is not written); None when the source does not parse or holds no
    such function (the names then decide)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    function = next(
        (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == kernel_name), None
    )
    if function is None:
        return None
    arguments = set(arg_names)
    derived = _derived_from(function, arguments)
    stored: set[str] = set()
    loaded: set[str] = set()
    used: set[str] = set()
    atomic_added: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id in arguments:
            used.add(node.id)
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        verb = node.func.attr
        if verb not in _WRITES and verb not in _READS:
            continue
        if _is_module_call(node.func.value):  # tl.store(pointer, ...)
            target = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
        else:  # descriptor.store(offsets, value): the object is what is written
            target = node.func.value
        if target is None:
            continue
        reached = _names_in(target, derived)
        (stored if verb in _WRITES else loaded).update(reached & arguments)
        if verb == "atomic_add":
            atomic_added.update(reached & arguments)
    return PointerUse(frozenset(stored), frozenset(loaded), frozenset(used), frozenset(atomic_added))


def _is_module_call(value: ast.expr) -> bool:
    """`tl.store`, `triton.language.store`: a call on a module name, not on a local descriptor."""
    return (isinstance(value, ast.Name) and value.id == "tl") or (
        isinstance(value, ast.Attribute) and value.attr == "language"
    )


def _derived_from(function: ast.FunctionDef, arguments: set[str]) -> dict[str, set[str]]:
    """Each local -> the arguments its assigned values name, transitively (`block = tl.make_block_ptr(out_ptr0,
    ...)`, `block = tl.advance(block, ...)`); arguments map to themselves."""
    derived: dict[str, set[str]] = {name: {name} for name in arguments}
    assignments = [
        (target, node.value)
        for node in ast.walk(function)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
    ]
    changed = True
    while changed:  # until no local gains an argument: loops assign in any order
        changed = False
        for target, value in assignments:
            reached = _names_in(value, derived)
            for name in _target_names(target):
                if name in arguments:
                    continue
                before = derived.setdefault(name, set())
                if not reached <= before:
                    before |= reached
                    changed = True
    return derived


def _names_in(expression: ast.AST, derived: dict[str, set[str]]) -> set[str]:
    """The arguments an expression's pointer may come from. A loaded value is data, not a pointer: an indirect
    index (`tl.store(out_ptr0 + tmp5, ...)` with `tmp5 = tl.load(in_ptr1 + x0)`) writes out_ptr0 only."""
    found: set[str] = set()
    pending = [expression]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _READS:
            continue
        if isinstance(node, ast.Name):
            found |= derived.get(node.id, set())
        pending.extend(ast.iter_child_nodes(node))
    return found


def _target_names(target: ast.AST) -> list[str]:
    return [node.id for node in ast.walk(target) if isinstance(node, ast.Name)]
