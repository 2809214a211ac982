"""Checks on the text of generated Triton kernels: flaws a kernel's code shows on its own, read at load.

Each check takes a kernel's source (its `def` on, as `JITFunction.src` holds it) and says what it found in one
sentence, or None. They run on every Triton kernel a wrapper module defines (`launches._kernel_info`), and a
localization answer naming a kernel quotes what they found: evidence read off the code, beside the evidence the
probe measured. A check's finding is never a verdict by itself.

- `unused_core_range`: offsets the kernel computes from its program's id (`tl.program_id`, or a name assigned
  from it, times a size), and what it derives from them, that nothing it does reads. torch_npu's
  `triton_experimental` codegen writes each core's share of a split reduction as such values
  (`r0__lo = rsplit_id * r0__per_core`, `r0__hi = ...`) and bounds the reduction loop by them; left unread,
  every program does the whole range (torch_npu 2.13.0, 2.14.0: docs/found/).
"""

from __future__ import annotations

import ast
import textwrap


def _kernel_function(source: str) -> ast.FunctionDef | None:
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    return next((node for node in tree.body if isinstance(node, ast.FunctionDef)), None)


def _names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _reads_program_id(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "program_id"
        for n in ast.walk(node)
    )


def _calls_arange(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "arange"
        for n in ast.walk(node)
    )


def _closure(assigned: dict[str, ast.AST], seeds: set[str]) -> set[str]:
    """`seeds` and every assigned name whose value reads one of them, transitively."""
    found, changed = set(seeds), True
    while changed:
        changed = False
        for name, value in assigned.items():
            if name not in found and _names_read(value) & found:
                found.add(name)
                changed = True
    return found


def unused_core_range(source: str) -> str | None:
    """Scalars computed from the program's id (a core's bounds, not a block of lanes: nothing of `tl.arange` in
    them) that nothing reads but their own dead kin."""
    function = _kernel_function(source)
    if function is None:
        return None
    assigned: dict[str, ast.AST] = {}  # name -> its value (the last plain assignment)
    order: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name not in assigned:
                order.append(name)
            assigned[name] = node.value
    # Values derived from the program's id, directly or through other derived names; blocks of lanes (masks,
    # indices: built on `tl.arange`) are left out, a kernel's dead `xmask` alias among them.
    derived = _closure(assigned, {name for name, value in assigned.items() if _reads_program_id(value)})
    derived -= _closure(assigned, {name for name, value in assigned.items() if _calls_arange(value)})
    # What the kernel reads outside those plain assignments (loads, stores, loops, conditions, other targets).
    readers: dict[str, set[str]] = {}  # name -> the assigned names whose values read it
    read_elsewhere: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            for read in _names_read(node.value):
                readers.setdefault(read, set()).add(node.targets[0].id)
        elif isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.Assign)):
            read_elsewhere |= _names_read(_header_of(node))
        elif isinstance(node, ast.Assign):
            read_elsewhere |= _names_read(node)
    # Live: read elsewhere, or read by a live name's value.
    live = set(read_elsewhere)
    changed = True
    while changed:
        changed = False
        for name in assigned:
            if name not in live and readers.get(name, set()) & live:
                live.add(name)
                changed = True
    unused = [name for name in order if name in derived and name not in live]
    # A share is an offset: the program's id times a size (`rsplit_id * r0__per_core`). A dead alias of the id
    # alone (`group_base = group_id` in a kernel of one element) bounds nothing.
    offsets = [name for name in unused if _scales(assigned[name], derived)]
    if not offsets:
        return None
    unused = [name for name in unused if name in _closure({n: assigned[n] for n in unused}, set(offsets))]
    return (
        f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} computed from the program's id (its share of "
        "the work) and never used: every program does the whole range"
    )


def _scales(value: ast.AST, derived: set[str]) -> bool:
    """Whether `value` multiplies a value derived from the program's id."""
    return any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and (_names_read(n) & derived or _reads_program_id(n))
        for n in ast.walk(value)
    )


def _header_of(statement: ast.stmt) -> ast.AST:
    """What a compound statement itself reads (a loop's range, a condition), not its body; a simple one whole."""
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return ast.Tuple(elts=[statement.iter], ctx=ast.Load())
    if isinstance(statement, (ast.If, ast.While)):
        return statement.test
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return ast.Tuple(elts=[item.context_expr for item in statement.items], ctx=ast.Load())
    return statement


# (name, check): what `text_findings` runs on every Triton kernel, in order.
CHECKS = (("unused-core-range", unused_core_range),)


def text_findings(source: str) -> list[str]:
    """Every check's finding on a kernel's source, "name: sentence"."""
    found = []
    for name, check in CHECKS:
        try:
            finding = check(source)
        except Exception:  # noqa: BLE001 - a check that cannot read a kernel says nothing of it
            finding = None
        if finding:
            found.append(f"{name}: {finding}")
    return found
