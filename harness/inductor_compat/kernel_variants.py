"""Kernel variants: generated kernels compiled again from rewritten source.

Some NPU-only bugs live in the code the NPU backend generates, not at its
launch boundary. Seed 002 (the RMSNorm weight-gradient report,
`cases/seed_rmsnorm_weight_grad.py`) is one: in reductions
over several flattened axes its codegen (1) initialises, reduces and stores
the accumulator inside the reduction loops, so only partial results survive,
and (2) flattens the axes in an order other than the one the index assumes.
CPU and CUDA Inductor generate these kernels correctly. To reproduce the bug
class there, the same flaw is written into the source Inductor generated, and
the rewritten kernel is compiled next to the original with the machinery the
wrapper module used; the emulation then launches the variant instead.

Written against: torch 2.13 on CPU (C++ codegen read in
`torch/_inductor/codegen/cpp.py` and `cpp_prefix.h`; its kernels compiled and
run here) and the Triton codegen of torch 2.11 to 2.13
(`codegen/triton.py`, `simd.py`, `runtime/triton_heuristics.py`). 2.13's
Triton codegen was read and its kernels generated here without a GPU
(`tests/generated_kernels.py`: codegen only, Triton is not installed); the
lines relied on were compared with published `triton_red_*` kernels of
recent releases. Triton variants run on CUDA and, with no GPU, on the
surrogate NPU's Triton mode (triton-ascend's interpreter,
`tests/npu_surrogate`). Older spellings (`range(...)` loop headers, `rindex`-based
decompositions) are matched where it costs nothing, untested.

The transformations are pure functions `source -> source | None` (None: the
kernel is not affected); a source of another shape raises
`UnrecognisedKernel`, and a variant that fails to compile stops the run:
an emulation never degrades silently into a no-op.

What is relied on
-----------------
- The wrapper module compiles each kernel with a top-level assignment
  `name = async_compile.cpp_pybinding([argtypes], r'''source''')` (C++) or
  `name = async_compile.triton('name', '''source''', device_str='cuda')`
  (Triton; the source holds the `@triton_heuristics...` decorator with
  `triton_meta` and `inductor_meta`, so the variant gets the same launch
  metadata and autotuning). `AsyncCompile().cpp_pybinding(argtypes, src)` and
  `AsyncCompile().triton(name, src, device_str)` compile a variant the same
  way; with parallel compile they return futures (`.result()`).

C++ kernels (`cpp_fused_*`):
- Loops are `for(int64_t xN=START; xN<END; xN+=STEP)` followed by a line
  holding only `{`; blocks open and close with lines holding only `{` / `}`
  (a line's other braces balance, e.g. lambdas and brace initialisers).
- Each reduction declares its accumulator before its loop nest, as
  `TYPE tmp_accN = INIT;` (also `tmp_accN_vec`, `masked_tmp_accN_vec`, and
  `..._local` inside `#pragma omp parallel` when the reduction itself is
  parallel), and updates it inside the nest with `tmp_accN... = ...;`. Float
  sums over more than 4096 elements and welford reductions keep partial
  results in helpers, `CascadeSumHelper<T, 4096> cascade_helperN(n);` and
  `WelfordHelper<T, 4096> welford_helperN(n);`, passed as `&helper` in the
  update (a `static` helper has no state: it only holds reciprocals).
- The reduction loops of an update are the `for(int64_t xN=...)` loops that
  enclose it and start after its accumulator's declaration.
- A loop chunk on CPU is one iteration of the innermost reduction loop: one
  vector (`at::vec` width: 16 float32 with AVX-512, 8 with AVX2; the tail is
  a masked vector) when the reduction is vectorized along its own axis, one
  reduction index when the kernel vectorizes along the output axis instead
  (outer reductions). Reductions of a few elements are unrolled, with no loop.

Triton kernels (`triton_red_*`, `triton_per_*`):
- A looping reduction runs `for r0_offset in tl.range(0, r0_numel, R0_BLOCK):`
  (2.11 to 2.13; `range(...)` in earlier releases, `rsplit_start, rsplit_end`
  for cooperative reductions; `r1_offset` nested inside for 2D reductions).
  Its accumulators are initialised just before the loop at the loop's
  indentation, `_tmpN = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)` (also
  `_tmpN_index`, `_tmpN_max`/`_tmpN_sum`; welford's `tmpN_mean`, `tmpN_m2`,
  `tmpN_weight` with `tl.zeros`), and reassigned in the loop body. The chunk
  is `R0_BLOCK`. Inductor's configs for most reductions include
  `R0_BLOCK = min(r0_numel, 2048)`, a single chunk whenever `r0_numel` is at
  most 2048, so the `reduction-partial` variant keeps only the launchers
  (`CachingAutotuner.launchers` after `precompile`, each with
  `config.kwargs["R0_BLOCK"]`) whose `R0_BLOCK` is below a static `r0_numel`,
  when there are any: it loops at least twice, as the NPU's small sub-blocks
  do. `triton_per_*` kernels have no loop: the whole reduction is one chunk.
- torch_npu 2.14's `triton_experimental` (kernels in `tests/fixtures/`, written by
  its own codegen on CPU and run by triton-ascend's interpreter) wraps the
  same loops in a group-dispatch `for i in range(group_size)` over its 40
  cores, splits long reductions over the cores (rsplit: `for r0_offset in
  range(r0__lo, r0__hi, R0_BLOCK)`, each core's share `r0__per_core`, which
  is the range `reduction-partial` must loop over at least twice), and loops
  over each axis of a multi-axis reduction on its own (`for r0_2inner in
  range(0, 5, r0_2_blk):` around `for r0_1inner in range(0, 7, r0_1_blk):`,
  then `tl.reshape`): no flattened index there, so `reduction-axis-order`
  flattens the axes and decomposes them reversed.
- A reduction over several axes that Inductor could not merge is one flattened
  index `r0_index`, decomposed in the kernel into one variable per axis:
  `r0_1 = (r0_index % 5)`, `r0_2 = ((r0_index // 5) % 6)`,
  `r0_3 = r0_index // 30` (innermost first or not; sizes may be symbols
  such as `ks0`). A variable equal to `r0_index` itself (an operand contiguous
  over all the axes) is no axis.
"""

from __future__ import annotations

import ast
import contextlib
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from harness.inductor_compat.kernel_source import (
    TRITON_LOOP,
    TritonReductionLoop,
    block_end,
    cpp_declaration,
    indent_of,  # noqa: F401
    triton_loop_accumulators,
    triton_reduction_loops,
)

MARK = "harness emulation"

# ---------------------------------------------------------------------------
# C++ (CPU) kernels


_CPP_FOR = re.compile(
    r"^\s*for\(int64_t (?P<var>x\d+)=(?P<start>[^;]+); (?P=var)<(?P<end>[^;]+); "
    r"(?P=var)\+=(?P<step>.+)\)\s*$"
)
_CPP_ACC_UPDATE = re.compile(
    r"^\s*(?P<name>(?:masked_)?tmp_acc\d+(?:_vec)?(?:_arr)?(?:_local)?)"
    r"(?P<index>\[[^\]]+\])?\s*=(?!=)\s*(?P<rhs>.*);\s*$"
)
_CPP_HELPER_REF = re.compile(r"&\s*(?P<name>\w*(?:cascade|welford)_helper\d+)")
_CPP_INT = re.compile(r"^\s*(?:static_cast<int64_t>\()?\s*(?P<value>-?\d+)L?\s*\)?\s*$")


@dataclass
class _CppLoop:
    header: int  # line of the `for(...)`
    open: int  # line of its `{`
    close: int  # line of its `}`
    var: str
    start: str
    end: str
    step: str

    def trips(self) -> int | None:
        start, end, step = (_cpp_int(t) for t in (self.start, self.end, self.step))
        if None in (start, end, step) or step <= 0:
            return None
        return max(0, -(-(end - start) // step))


@dataclass
class _CppNest:
    """The reduction loops (outermost first) that one or more accumulator updates run in."""

    loops: list[_CppLoop]
    reinit: list[str]

    @property
    def innermost(self) -> _CppLoop:
        return self.loops[-1]

    def single_chunk(self) -> bool:
        trips = [loop.trips() for loop in self.loops]
        return None not in trips and math.prod(trips) <= 1


def cpu_chunk_elements(dtype: Any = None) -> int:
    """Elements of `dtype` (default float32) in one vector of the C++ codegen on this machine.

    1 when Inductor found no vector ISA (its loops are then scalar); 16 when
    the check itself cannot run (no C++ compiler: no C++ kernels either).
    """
    import torch
    from torch._inductor import cpu_vec_isa

    try:
        isa = cpu_vec_isa.pick_vec_isa()
    except Exception:
        return 16
    return isa.nelements(dtype or torch.float32) if isa else 1


def _cpp_int(text: str) -> int | None:
    match = _CPP_INT.match(text)
    return int(match.group("value")) if match else None


class UnrecognisedKernel(ValueError):
    """The generated source does not have the shape this module was written against."""


def _cpp_structure(lines: list[str]) -> tuple[dict[int, _CppLoop], list[list[int]]]:
    """Every `for(int64_t xN=...)` loop, and for each line the headers of the loops enclosing it."""
    loops: dict[int, _CppLoop] = {}
    enclosing: list[list[int]] = []
    stack: list[tuple[int, int | None]] = []  # (line of `{`, loop header or None)
    pending: int | None = None  # a loop header waiting for its `{`
    for number, line in enumerate(lines):
        stripped = line.strip()
        enclosing.append([header for _, header in stack if header is not None])
        if stripped == "{":
            stack.append((number, pending))
            pending = None
            continue
        if stripped == "}":
            if not stack:
                raise UnrecognisedKernel(f"unbalanced '}}' at line {number + 1}")
            opened, header = stack.pop()
            if header is not None:
                loops[header].close = number
            continue
        if stripped.count("{") != stripped.count("}"):
            raise UnrecognisedKernel(f"a brace that opens or closes a block inside line {number + 1}: {stripped!r}")
        match = _CPP_FOR.match(line)
        if match:
            if not lines[number + 1].strip() == "{":
                raise UnrecognisedKernel(f"loop at line {number + 1} has no '{{' line after it")
            loops[number] = _CppLoop(
                number,
                number + 1,
                -1,
                match["var"],
                match["start"].strip(),
                match["end"].strip(),
                match["step"].strip(),
            )
            pending = number
        elif stripped and not stripped.startswith(("#", "//")):
            pending = None
    if stack:
        raise UnrecognisedKernel("a block is never closed")
    return loops, enclosing


def _cpp_array_init(lines: list[str], name: str, index: str, before: int) -> tuple[int, str] | None:
    """`NAME[i] = INIT;` in the loop that fills an accumulator array: the statement for one element."""
    pattern = re.compile(r"^\s*" + re.escape(name) + r"\[i\]\s*=\s*(?P<init>.+);\s*$")
    for number in range(before - 1, -1, -1):
        match = pattern.match(lines[number])
        if match:
            return number, f"{name}{index} = {match['init'].strip()};"
    return None


def _cpp_reduction_nests(lines: list[str]) -> list[_CppNest]:
    """Each innermost reduction loop with the statements that re-initialise what it accumulates into."""
    loops, enclosing = _cpp_structure(lines)
    nests: dict[int, _CppNest] = {}
    for number, line in enumerate(lines):
        update = _CPP_ACC_UPDATE.match(line)
        if update is None:
            continue
        name, index = update["name"], update["index"]
        declared = _cpp_array_init(lines, name, index, number) if index else cpp_declaration(lines, name, number)
        if declared is None:
            continue
        reduction_loops = [loops[h] for h in enclosing[number] if h > declared[0]]
        if not reduction_loops:
            continue  # a combine after the loops (`tmp_acc0 = tmp_acc0 + vec_reduce_all(...)`)
        nest = nests.setdefault(reduction_loops[-1].header, _CppNest(reduction_loops, []))
        statements = [declared[1]]
        for helper in _CPP_HELPER_REF.findall(update["rhs"]):
            found = cpp_declaration(lines, helper, number)
            if found is not None:
                statements.append(found[1])
        nest.reinit += [s for s in statements if s is not None and s not in nest.reinit]
    return list(nests.values())


def _insert_after(lines: list[str], insertions: dict[int, list[str]]) -> str:
    out = []
    for number, line in enumerate(lines):
        out.append(line)
        out.extend(insertions.get(number, ()))
    return "\n".join(out)


def cpp_reduction_partial(source: str) -> str | None:
    """Re-initialise each accumulator at the top of its innermost reduction loop (None: no looping reduction).

    Every iteration then starts from the reduction's initial value, so only
    the last chunk's contribution reaches the store after the loops. A nest
    whose loops run exactly once in all is left alone (nothing to lose).
    """
    lines = source.split("\n")
    insertions: dict[int, list[str]] = {}
    for nest in _cpp_reduction_nests(lines):
        if nest.single_chunk() or not nest.reinit:
            continue
        body = indent_of(lines[nest.innermost.open]) + "    "
        note = f"{body}// {MARK} (reduction-partial): accumulator re-initialised in the loop"
        insertions[nest.innermost.open] = [note, *(body + statement for statement in nest.reinit)]
    return _insert_after(lines, insertions) if insertions else None


def _c_product(terms: list[str]) -> str:
    known = math.prod(int(t) for t in terms if t.isdigit())
    symbolic = [f"({t})" for t in terms if not t.isdigit()]
    return "*".join(([str(known)] if known != 1 or not symbolic else []) + symbolic)


def cpp_reduction_axis_order(source: str) -> str | None:
    """Decompose the flattened index of a multi-axis reduction nest with its axes in reversed order.

    A nest of reduction loops over axes of trip counts (n1, ..., nk) (outer
    first) walks the flattened index f = ((c1*n2 + c2)*n3 + ...) of the
    chunk indices cj = (xj - start) / step. The variant decomposes f as if the
    axes were laid out (nk, ..., n1), gives axis j the j-th digit (wrapped to
    its own count, so every read stays inside the tensor) and renames the loop
    variables in the body. Axes of unequal counts then read wrong elements.
    """
    lines = source.split("\n")
    insertions: dict[int, list[str]] = {}
    renames: list[tuple[int, int, dict[str, str]]] = []
    for nest in _cpp_reduction_nests(lines):
        axes = [loop for loop in nest.loops if loop.trips() != 1]
        if len(axes) < 2:
            continue
        counts = [
            str(loop.trips())
            if loop.trips() is not None
            else f"(({loop.end}) - ({loop.start}) + ({loop.step}) - 1) / ({loop.step})"
            for loop in axes
        ]
        flat = _cpp_chunk_index(axes[0])
        for count, loop in zip(counts[1:], axes[1:]):
            flat = f"{_c_paren(flat) if '+' in flat else flat} * {_c_paren(count)} + {_cpp_chunk_index(loop)}"
        reversed_counts = counts[::-1]
        body = indent_of(lines[nest.innermost.open]) + "    "
        statements = [
            f"// {MARK} (reduction-axis-order): flattened reduction index decomposed with the axes reversed",
            f"const int64_t flat_wrong_order = {flat};",
        ]
        mapping = {}
        for position, loop in enumerate(axes):
            divisor = _c_product(reversed_counts[position + 1 :])
            digit = "flat_wrong_order" if divisor == "1" else f"(flat_wrong_order / {_c_paren(divisor)})"
            if position > 0:
                digit = f"({digit} % {_c_paren(reversed_counts[position])})"
            chunk = f"({digit} % {_c_paren(counts[position])})"
            renamed = f"{loop.var}_wrong_order"
            statements.append(f"const int64_t {renamed} = {_cpp_from_chunk(loop, chunk)};")
            mapping[loop.var] = renamed
        insertions[nest.innermost.open] = [body + s for s in statements]
        renames.append((nest.innermost.open + 1, nest.innermost.close, mapping))
    if not insertions:
        return None
    for first, last, mapping in renames:
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, mapping)) + r")\b")
        for number in range(first, last):
            lines[number] = pattern.sub(lambda m: mapping[m.group(1)], lines[number])
    return _insert_after(lines, insertions)


def _c_paren(text: str) -> str:
    return text if text.isdigit() else f"({text})"


def _cpp_chunk_index(loop: _CppLoop) -> str:
    """Which chunk of its loop `loop.var` is in: (var - start) / step."""
    start, step = _cpp_int(loop.start), _cpp_int(loop.step)
    offset = loop.var if start == 0 else f"({loop.var} - ({loop.start}))"
    return offset if step == 1 else f"{offset} / {step if step is not None else _c_paren(loop.step)}"


def _cpp_from_chunk(loop: _CppLoop, chunk: str) -> str:
    """The loop variable's value at the start of chunk `chunk`: start + step * chunk."""
    start, step = _cpp_int(loop.start), _cpp_int(loop.step)
    scaled = chunk if step == 1 else f"{step if step is not None else _c_paren(loop.step)} * {chunk}"
    return scaled if start == 0 else f"({loop.start}) + {scaled}"


# ---------------------------------------------------------------------------
# Triton kernels


# Inductor's `for r0_offset in tl.range(0, r0_numel, R0_BLOCK):` (torch_npu's rsplit kernels: `range(r0__lo,
# r0__hi, R0_BLOCK)`), and torch_npu's real-block multi-axis loops, one per axis:
# `for r0_2inner in range(0, 5, r0_2_blk):` around `for r0_1inner in range(0, 7, r0_1_blk):`, or a scalar loop
# over an outer axis (`for r0_2 in range(6):`) around the `r0_offset` loop.
_TRITON_AXIS = re.compile(r"^(?P<indent>[ \t]*)(?P<var>r\d*_?\d+) = (?P<expr>.+?)[ \t]*$")
_AXIS_FORMS = (
    # (r0_index % N): the innermost axis
    re.compile(r"^\((?P<base>r\d*_?index) % (?P<n>.+)\)$"),
    # ((r0_index // D) % N): a middle axis
    re.compile(r"^\(\((?P<base>r\d*_?index) // (?P<d>.+?)\) % (?P<n>.+)\)$"),
    # r0_index // D: the outermost axis
    re.compile(r"^(?P<base>r\d*_?index) // (?P<d>.+)$"),
)


def triton_reduction_partial(source: str) -> str | None:
    """Re-initialise a looping reduction's accumulators at the top of its innermost `r` loop.

    Each `for r0_offset in tl.range(...)` loop of a `triton_red_*` kernel then
    keeps only the last `R0_BLOCK` chunk (a real-block nest of torch_npu's: the
    last tile of its innermost loop). Kernels without such a loop
    (`triton_per_*`, pointwise) come back as None; so do loops that
    accumulate nothing (a softmax's last pass only stores).
    """
    lines = source.split("\n")
    insertions: dict[int, list[str]] = {}
    for loop in triton_reduction_loops(lines):
        if loop.inits:
            body = indent_of(lines[loop.innermost]) + "    "
            insertions[loop.innermost] = [
                f"{body}# {MARK} (reduction-partial): accumulators re-initialised in the loop",
                *(body + init for init in loop.inits),
            ]
    return _insert_after(lines, insertions) if insertions else None


@dataclass
class _TritonAxis:
    var: str
    divisor: Any  # sympy expression
    size: Any  # sympy expression; None for the outermost axis (r0_numel // divisor)


_SIZE_TEXT = re.compile(r"^[\w*+ ()]+$")  # products and sums of integers and size symbols (ks0), nothing else


def triton_reduction_axis_order(source: str) -> str | None:
    """Decompose a multi-axis flattened reduction index with the axes in reversed order.

    Inductor writes `r0_1 = (r0_index % n1)`, `r0_2 = ((r0_index // n1) % n2)`,
    `r0_3 = r0_index // (n1*n2)`. The variant decomposes `r0_index` as if the
    sizes were laid out the other way round (n3, n2, n1), gives each axis the
    digit at its own position, wrapped to its own size so that every read
    stays inside the tensor: `r0_1 = ((r0_index % n3) % n1)`,
    `r0_2 = (((r0_index // n3) % n2) % n2)`, `r0_3 = ((r0_index // (n3*n2)) % n3)`.
    Axes of unequal sizes then read wrong elements, as seed 002's flatten did.
    None when no index is decomposed into two axes or more.
    """
    import sympy

    lines = source.split("\n")
    found: dict[str, dict[str, _TritonAxis]] = {}
    where: dict[int, tuple[str, str]] = {}
    for number, line in enumerate(lines):
        match = _TRITON_AXIS.match(line)
        if match is None:
            continue
        for form in _AXIS_FORMS:
            axis = form.match(match["expr"])
            if axis is None:
                continue
            parts = axis.groupdict()
            texts = [t for t in (parts.get("d"), parts.get("n")) if t is not None]
            if not all(_SIZE_TEXT.match(t) for t in texts):
                raise UnrecognisedKernel(f"reduction axis {match['var']} = {match['expr']}")
            divisor = sympy.sympify(parts.get("d") or "1")
            size = sympy.sympify(parts["n"]) if parts.get("n") else None
            found.setdefault(axis["base"], {})[match["var"]] = _TritonAxis(match["var"], divisor, size)
            where[number] = (axis["base"], match["var"])
            break
    replacements: dict[str, dict[str, str]] = {}
    for base, axes in found.items():
        ordered = _ordered_axes(list(axes.values()))
        if ordered is None or len(ordered) < 2:
            continue
        numel_name = base.replace("index", "numel")
        static = re.search(rf"^[ \t]*{numel_name} = (\d+)[ \t]*$", source, re.M)
        numel = sympy.Integer(int(static.group(1))) if static else sympy.Symbol(numel_name)
        sizes = [axis.size if axis.size is not None else numel / axis.divisor for axis in ordered]
        reversed_sizes = sizes[::-1]
        exprs = {}
        for position, axis in enumerate(ordered):
            divisor = sympy.Mul(*reversed_sizes[:position])
            digit = f"({base} // {_py(divisor, numel_name)})" if divisor != 1 else base
            if position < len(ordered) - 1:
                digit = f"({digit} % {_py(reversed_sizes[position], numel_name)})"
            exprs[axis.var] = f"({digit} % {_py(sizes[position], numel_name)})"
        replacements[base] = exprs
    if not replacements:
        return _real_block_axis_order(lines)
    out: list[str] = []
    previous_replaced = False
    for number, line in enumerate(lines):
        replaced = number in where and where[number][0] in replacements
        if replaced:
            base, var = where[number]
            if not previous_replaced:
                note = f"# {MARK} (reduction-axis-order): {base} decomposed with the axes reversed"
                out.append(indent_of(line) + note)
            out.append(f"{indent_of(line)}{var} = {replacements[base][var]}")
        else:
            out.append(line)
        previous_replaced = replaced
    return "\n".join(out)


SIZES_ONLY = "r0_numel"  # (for `_py`: a real-block axis's size never involves the reduction's numel)
_REAL_BLOCK_LOOP = re.compile(r"^[ \t]*for (?P<var>r\d*_\d+)inner in range\(0, (?P<size>[^,]+), \w+\):[ \t]*$")


def _real_block_axis_order(lines: list[str]) -> str | None:
    """torch_npu's multi-axis reductions (its `real_block` codegen) loop over each axis on its own, one loop per
    axis (`for r0_2inner in range(0, 5, r0_2_blk):` around `for r0_1inner in range(0, 7, r0_1_blk):`, then
    `r0_2 = r0_2inner + tl.arange(...)`, `r0_2mask = r0_2 < 5`, ...): there is no flattened index to decompose.
    The variant makes one from the axes (the innermost loop's axis innermost), and decomposes it with the axes
    reversed as the flattened form's variant does, each axis wrapped to its own size, after the masks (which
    keep the lanes they had). None when no nest has two axes or more."""
    import sympy

    out = list(lines)
    inserted = 0
    for loop in triton_reduction_loops(lines):
        axes = []  # outermost first: (variable, size)
        for number in range(loop.outer, loop.innermost + 1):
            if match := _REAL_BLOCK_LOOP.match(lines[number]):
                axes.append((match["var"], match["size"].strip()))
        if len(axes) < 2 or not all(_SIZE_TEXT.match(size) for _, size in axes):
            continue
        names = {var for var, _ in axes}
        defined = [
            number
            for number in range(loop.innermost + 1, loop.end)
            if (m := re.match(r"^[ \t]*(\w+?)(?:mask)? = ", lines[number])) and m.group(1) in names
        ]
        if not defined:
            continue
        inner = axes[::-1]
        sizes = [sympy.sympify(size) for _, size in inner]
        prefix = re.match(r"r\d*_", inner[0][0]).group(0)
        flat = f"{prefix}flat"
        indent = indent_of(lines[defined[-1]])
        terms = [
            var if position == 0 else f"{_py(sympy.Mul(*sizes[:position]), SIZES_ONLY)}*{var}"
            for position, (var, _) in enumerate(inner)
        ]
        reversed_sizes = sizes[::-1]
        new = [
            f"{indent}# {MARK} (reduction-axis-order): the {prefix} axes, flattened, decomposed reversed",
            f"{indent}{flat} = {' + '.join(terms)}",
        ]
        for position, (var, _) in enumerate(inner):
            divisor = sympy.Mul(*reversed_sizes[:position])
            digit = f"({flat} // {_py(divisor, SIZES_ONLY)})" if divisor != 1 else flat
            if position < len(inner) - 1:
                digit = f"({digit} % {_py(reversed_sizes[position], SIZES_ONLY)})"
            new.append(f"{indent}{var} = ({digit} % {_py(sizes[position], SIZES_ONLY)})")
        at = defined[-1] + 1 + inserted
        out[at:at] = new
        inserted += len(new)
    return "\n".join(out) if inserted else None


def _ordered_axes(axes: list[_TritonAxis]) -> list[_TritonAxis] | None:
    """Axes innermost first; None if they do not form one decomposition of the index.

    The innermost axis is `% n` alone, the outermost `// d` alone; a middle
    axis's divisor is the product of the sizes inside it. With dynamic shapes
    Inductor may pass that product as its own size argument (`r0_index // ks3`
    with ks3 = ks0*ks1), which cannot be proven equal: a single middle axis
    is placed by its form, several must chain provably.
    """
    import sympy

    inner = [axis for axis in axes if axis.divisor == 1 and axis.size is not None]
    outer = [axis for axis in axes if axis.size is None]
    middle = [axis for axis in axes if axis.divisor != 1 and axis.size is not None]
    if len(inner) != 1 or len(outer) > 1:
        return None
    ordered, divisor = list(inner), inner[0].size
    while middle:
        step = [axis for axis in middle if sympy.simplify(axis.divisor - divisor) == 0]
        if len(step) != 1 and len(middle) == 1:
            step = middle
        if len(step) != 1:
            return None
        ordered.append(step[0])
        middle.remove(step[0])
        divisor = divisor * step[0].size
    return ordered + outer


def _py(expr: Any, numel_name: str) -> str:
    """A size expression as Triton source; a symbolic outermost size is printed as `r0_numel // divisor`."""
    import sympy

    numel = sympy.Symbol(numel_name)
    if expr.has(numel):
        numerator, denominator = sympy.fraction(sympy.together(expr))
        text = str(numerator).replace(" ", "")
        return f"(({text}) // ({denominator}))" if denominator != 1 else f"({text})"
    text = str(expr).replace(" ", "")
    return text if re.fullmatch(r"\w+", text) else f"({text})"


# ---------------------------------------------------------------------------
# Registry, activation, compilation

Rewrite = Callable[[str], "str | None"]

REWRITERS: dict[str, dict[str, Rewrite]] = {
    "reduction-partial": {"cpp": cpp_reduction_partial, "triton": triton_reduction_partial},
    "reduction-axis-order": {"cpp": cpp_reduction_axis_order, "triton": triton_reduction_axis_order},
}


# What each rewriter recognises, for the error of a run in which it rewrote nothing.
RECOGNISED = {
    "reduction-partial": "C++ reductions whose accumulator (`tmp_accN`) is updated in a "
    "`for(int64_t xN=...)` loop nest that runs more than once, and Triton reductions that loop "
    "(`for r0_offset in tl.range(0, r0_numel, R0_BLOCK)`, torch_npu's rsplit "
    "`range(r0__lo, r0__hi, R0_BLOCK)` and real-block `for r0_1inner in range(0, 7, r0_1_blk)`; "
    "accumulators set before the loop); persistent reductions and unrolled ones have no loop",
    "reduction-axis-order": "C++ reductions over two or more nested reduction loops of unequal trip counts, and "
    "Triton reductions that decompose one flattened `r0_index` into a variable per axis "
    "(`r0_1 = (r0_index % 5)`, `r0_2 = r0_index // 5`) or, as torch_npu does, loop over "
    "each axis on its own (`for r0_2inner ...: for r0_1inner ...:`)",
}


def rewrite(name: str, kind: str, source: str) -> str | None:
    """The source of `name`'s variant of a `kind` ("cpp", "triton") kernel; None if it is not affected."""
    rewriter = REWRITERS[name].get(kind)
    return rewriter(source) if rewriter is not None else None


@dataclass
class KernelVariant:
    """A kernel compiled from rewritten source; `invoke` is called as the original launch is."""

    rewriter: str
    source: str
    invoke: Callable[..., Any]


class _Active:
    """Process-wide, as launch interception is: backward graphs load on autograd's threads."""

    rewriters: tuple[str, ...] = ()


_active = _Active()
_compile_lock = threading.RLock()


@contextlib.contextmanager
def rewriting(names: tuple[str, ...] | list[str]) -> Iterator[None]:
    """While active, every wrapper module loaded gets variants of its kernels for these rewriters."""
    unknown = [n for n in names if n not in REWRITERS]
    if unknown:
        raise ValueError(f"unknown kernel rewriters {unknown}; known: {', '.join(REWRITERS)}")
    previous = _active.rewriters
    _active.rewriters = tuple(dict.fromkeys((*previous, *names)))
    try:
        yield
    finally:
        _active.rewriters = previous


def active_rewriters() -> tuple[str, ...]:
    return _active.rewriters


def attach_variants(module: Any) -> None:
    """Compile the active rewriters' variants of a loaded wrapper module's kernels; attach them to each KernelInfo.

    Called for every module `PyCodeCache.load_by_key_path` loads (fresh
    compiles and cache hits alike; a module loaded again is the same object,
    whose kernels keep the variants they already have).
    """
    names = _active.rewriters
    if not names:
        return
    proxies = {name: value for name, value in vars(module).items() if hasattr(getattr(value, "info", None), "variants")}
    if not proxies:
        return
    with _compile_lock:
        calls = None
        for global_name, proxy in proxies.items():
            info = proxy.info
            for rewriter in names:
                if rewriter in info.variants:  # a KernelVariant, or None: not affected
                    continue
                if calls is None:
                    calls = _compile_calls(getattr(module, "__file__", None))
                call = calls.get(global_name)
                if call is None:
                    continue
                try:
                    source = rewrite(rewriter, info.kind, call.source)
                    if source is None:
                        info.variants[rewriter] = None
                        continue
                    compiled = call.compile(source)
                    if rewriter == "reduction-partial" and call.kind == "triton":
                        _loop_at_least_twice(compiled, source)
                except Exception as exc:
                    raise RuntimeError(
                        f"the {rewriter} variant of {info.name} could not be made ({type(exc).__name__}: {exc})"
                    ) from exc
                invoke = compiled.run if call.kind == "triton" else compiled
                info.variants[rewriter] = KernelVariant(rewriter, source, invoke)


def variant(info: Any, rewriter: str) -> KernelVariant | None:
    """The `rewriter` variant attached to a kernel (a `KernelInfo`), if it has one."""
    found = getattr(info, "variants", {}).get(rewriter)
    return found if isinstance(found, KernelVariant) else None


@dataclass
class _CompileCall:
    kind: str
    source: str
    compile: Callable[[str], Callable[..., Any]]


def _compile_calls(path: str | None) -> dict[str, _CompileCall]:
    """Global name -> how the wrapper module compiled that kernel, read from the module's source."""
    if not path:
        return {}
    try:
        with open(path) as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return {}
    calls = {}
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id == "async_compile"
        ):
            continue
        method, call = node.value.func.attr, node.value
        try:
            args = [ast.literal_eval(a) for a in call.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        except ValueError:
            continue
        name = node.targets[0].id
        if method == "cpp_pybinding" and len(args) == 2:
            argtypes = args[0]
            calls[name] = _CompileCall("cpp", args[1], lambda src, a=argtypes: _cpp_compile(a, src))
        elif method == "triton" and args:
            kernel_name, source = args[0], args[1] if len(args) > 1 else kwargs["source_code"]
            device = args[2] if len(args) > 2 else kwargs.get("device_str", "cuda")
            calls[name] = _CompileCall(
                "triton", source, lambda src, k=kernel_name, d=device: _triton_compile(k, src, d)
            )
    return calls


def _resolved(value: Any) -> Any:
    from concurrent.futures import Future

    try:
        from torch._inductor.codecache import CodeCacheFuture
    except ImportError:  # pragma: no cover - older torch
        CodeCacheFuture = Future
    return value.result() if isinstance(value, (Future, CodeCacheFuture)) else value


def _cpp_compile(argtypes: list[str], source: str) -> Callable[..., Any]:
    from torch._inductor.async_compile import AsyncCompile

    return _resolved(AsyncCompile().cpp_pybinding(argtypes, source))


def _triton_compile(kernel_name: str, source: str, device: str) -> Any:
    """The variant's CachingAutotuner.

    Compiled in this process, a kernel module is loaded through
    `PyCodeCache.load_by_key_path`, whose kernels `launches` wraps in proxies
    that report launches: the variant must launch as itself, unobserved (the
    launch of the original kernel it stands in for is already observed).
    """
    from torch._inductor.async_compile import AsyncCompile

    kernel = _resolved(AsyncCompile().triton(kernel_name, source, device_str=device))
    # Asked of the class: a proxy forwards unknown instance attributes to the kernel it wraps.
    while getattr(type(kernel), "wraps_an_observed_kernel", False):
        kernel = kernel.kernel
    return kernel


def _loop_at_least_twice(autotuner: Any, source: str) -> None:
    """Keep only the launch configs whose R0_BLOCK is below the range one program reduces, when there are some.

    A `triton_red_*` kernel loops by design, but the autotuner may still pick
    an `R0_BLOCK` that covers the whole reduction (Inductor offers
    `min(r0_numel, 2048)` among the configs of most reductions), and one chunk
    hides the bug. The NPU's sub-blocks are far smaller than a GPU's blocks, so
    the variant autotunes among the configs that loop. The range is a static
    `r0_numel`, or in torch_npu's rsplit kernels each core's share of it
    (`r0__per_core = (r0_numel + rsplit_nsplit - 1) // rsplit_nsplit`, with
    `rsplit_nsplit = total_thread`). Both `CachingAutotuner.configs` (what
    `precompile` compiles; torch_npu's `NPUCachingAutotuner` subclasses it) and
    its `launchers` (filled by `precompile`, each with `config.kwargs`) are kept
    to those; anything else leaves the autotuner as it is.
    """
    per_program = _reduced_per_program(source)
    if per_program is None:
        return

    def loops(config: Any) -> bool:
        return 0 < config.kwargs.get("R0_BLOCK", 0) < per_program

    try:
        configs = [config for config in getattr(autotuner, "configs", None) or [] if loops(config)]
        launchers = [launcher for launcher in getattr(autotuner, "launchers", None) or [] if loops(launcher.config)]
    except AttributeError:
        return
    if configs:
        autotuner.configs = configs
    if launchers:
        autotuner.launchers = launchers


def _reduced_per_program(source: str) -> int | None:
    numel = re.search(r"^[ \t]*r0_numel = (\d+)[ \t]*$", source, re.M)
    if numel is None:
        return None
    if re.search(r"^[ \t]*r0_+per_core = ", source, re.M):
        split = re.search(r"^[ \t]*rsplit_nsplit = (?P<n>\d+|total_thread)[ \t]*$", source, re.M)
        cores = re.search(r"^[ \t]*total_thread = (\d+)[ \t]*$", source, re.M)
        count = split and (int(split["n"]) if split["n"].isdigit() else int(cores.group(1)) if cores else None)
        if count:
            return -(-int(numel.group(1)) // count)
    return int(numel.group(1))


# triton-ascend's reduction classes (harness/inject/ascend): their rewriters live in padding_variants.py.
from harness.inductor_compat.padding_variants import RECOGNISED as _PADDING_RECOGNISED, REWRITERS as _PADDING_REWRITERS  # noqa: E402

REWRITERS.update(_PADDING_REWRITERS)
RECOGNISED.update(_PADDING_RECOGNISED)
