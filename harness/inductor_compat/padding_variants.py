"""Kernel variants for two triton-ascend reduction classes: what the lanes past a tile's edge hold, and which
lanes a narrow tile reduces. Registered with `kernel_variants.REWRITERS`, compiled and launched as the
seed-002 variants are (`harness/inject/rewritten.py`).

`masked-load-garbage` (triton-ascend PR #714, #953): a masked `tl.load` without
`other` leaves its masked lanes uninitialised on Ascend. torch_npu's
`triton_experimental` codegen (torch_npu 2.14.0,
`_inductor/triton_experimental/codegen/triton.py` and `config.py`) can also
drop the zero fill Inductor writes (`inject_care_padding` marks `other=0.0`
loads `care_padding=False`) and elides the reduction's `tl.where` guard
(`elide_reduction_where`, on by default), relying on the fill. Together the
reduction reads the garbage. The variant does both to Inductor's kernel:
- Triton: loads masked by the range masks alone (`r0_mask & xmask`; torch_npu's
  per-node `r0_mask & x0mask`, `(r0_2mask & r0_1mask) & x0mask`) get
  `other=float("nan")` (integer pointees: 1234), and
  `tl.where(<range masks>, value, neutral)` guards that hold a reduction mask
  become `value` (torch_npu has already elided those its zero fill covers);
- C++: the tail of a vectorized reduction, `sum_masked_reduce(acc, v, n)` (and
  max/min/prod/xor_sum/any), reduces the whole vector, lanes `n` and up of `v`
  holding NaN (integers: 1234).

`reduction-small-inner` (triton-ascend #2247, Ascend A5): a reduction over a
2-D tile whose inner (contiguous) extent K is below 8 drops lanes. Inductor
unrolls reductions of fewer than 8 elements (`unroll_reductions_threshold`),
so in its kernels this tile is an outer reduction: the kept axis is contiguous
and narrower than 8 (column sums of a `[T, K]` tensor, the MoE histogram of the
report). The upper half of those K lanes (from `max(1, K // 2)`) never reach
the accumulator, which keeps its initial value there:
- Triton: in a reduction kernel whose loads are contiguous along an `x`
  variable of static extent K < 8 (`x0 = xindex` with `xnumel = K`, or
  `x0 = (xindex % K)`; torch_npu's `x0 = x0index` with
  `x0numel : tl.constexpr = K`), each range-mask guard gains `& (x0 < keep)`,
  and an accumulator update left unguarded in a reduction loop (torch_npu's
  elided `where`: `_tmp2 = tmp3`) becomes `tl.where(x0 < keep, tmp3, _tmp2)`;
- C++: a reduction vectorized along its kept axis
  (`if(C10_LIKELY(x0 >= 0 && x0 < K))` around the update, `x0`'s loop
  enclosing the accumulator's declaration) with `*_masked_reduce(acc, v, K)`,
  K < 8, reduces `keep` lanes.

Written against torch 2.13's codegen (`codegen/cpp.py` `reduction_combine_vec`,
`cpp_prefix.h` `*_masked_reduce`; `codegen/triton.py` `reduction` and `load`);
the Triton variants were compiled and run on the H200 (torch 2.11, Triton 3.6).
torch_npu 2.14.0's `triton_experimental` kernels (`tests/fixtures/`, written by
its own codegen on CPU) were read and, with their variants, run by
triton-ascend 3.2.0's interpreter (`tests/npu_kernel_runs.py`).
"""

from __future__ import annotations

import ast
import re

from harness.inductor_compat.kernel_source import cpp_declaration, indent_of, triton_loop_accumulators

MASKED_LOAD_GARBAGE = "masked-load-garbage"
REDUCTION_SMALL_INNER = "reduction-small-inner"
# What masked-off lanes hold: NaN in floating types (uninitialised memory often decodes so, and it shows through
# sums, maxima and minima alike), this in integer ones (no reduction's neutral element).
GARBAGE = 1234
NARROW = 8  # the tile's inner extent below which #2247 drops lanes

# ---------------------------------------------------------------------------
# Triton

# A range mask: Inductor's `xmask`, `rmask`, `r0_mask`; torch_npu's per-node `x0mask`, `r0_1mask` (its
# real-block multi-axis loops), combined with `&`, parenthesised or not: `(r0_2mask & r0_1mask) & x0mask`.
_RANGE_MASK_NAME = re.compile(r"^(?:[xyz]\d*mask|r\d*_?\d*mask)$")
_REDUCTION_MASK = re.compile(r"\br\d*_?\d*mask\b")


def _range_mask(node: ast.AST) -> str | None:
    """The text of a mask made of range masks alone (`r0_mask & xmask`), None otherwise."""
    return ast.unparse(node) if _range_mask_names(node) else None


def _range_mask_names(node: ast.AST) -> list[str] | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        left, right = _range_mask_names(node.left), _range_mask_names(node.right)
        return left + right if left and right else None
    if isinstance(node, ast.Name) and _RANGE_MASK_NAME.match(node.id):
        return [node.id]
    return None


def _statement(line: str) -> ast.stmt | None:
    try:
        body = ast.parse(line.strip()).body
    except SyntaxError:
        return None
    return body[0] if len(body) == 1 else None


def _call(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == name


def _rewrite_lines(source: str, rewrite) -> str | None:
    """Apply `rewrite(statement) -> new statement | None` to each one-line statement; None if none changed."""

    lines, changed = source.split("\n"), False
    for number, line in enumerate(lines):
        if "tl." not in line:
            continue
        statement = _statement(line)
        if statement is None:
            continue
        new = rewrite(statement)
        if new is not None:
            lines[number] = indent_of(line) + ast.unparse(new)
            changed = True
    return "\n".join(lines) if changed else None


def _is_reduction_kernel(source: str) -> bool:
    return re.search(r"\br\d*_?numel\b", source) is not None  # `r0_numel = 60`, or a parameter (combine kernels)


_SIGNATURE_POINTER = re.compile(r"'(?P<name>\w+)': '\*(?P<type>\w+)'")


def _garbage_for(pointer_type: str | None) -> ast.expr:
    """NaN for a floating pointee (it shows through any reduction), GARBAGE for the rest."""
    if pointer_type is not None and pointer_type.startswith(("fp", "bf")):
        return ast.parse('float("nan")', mode="eval").body
    return ast.Constant(GARBAGE)


class _PaddingGarbage(ast.NodeTransformer):
    """Range-masked loads get garbage as `other`; range-mask guards become their value (anywhere in a
    statement: a load is often wrapped, `tl.load(...).to(tl.float32)`)."""

    def __init__(self, pointer_types: dict[str, str]) -> None:
        self.pointer_types, self.changed = pointer_types, False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _call(node, "tl.load") and len(node.args) > 1 and _reduction_range_mask(node.args[1]):
            pointer = next(
                (n.id for n in ast.walk(node.args[0]) if isinstance(n, ast.Name) and n.id in self.pointer_types), None
            )
            garbage = _garbage_for(self.pointer_types.get(pointer))
            node.keywords = [k for k in node.keywords if k.arg != "other"] + [ast.keyword("other", garbage)]
            self.changed = True
        elif _call(node, "tl.where") and len(node.args) == 3 and _reduction_range_mask(node.args[0]):
            self.changed = True
            return node.args[1]  # the guard elided: padding lanes reach the reduction
        return node


def _reduction_range_mask(node: ast.AST) -> bool:
    mask = _range_mask(node)
    return mask is not None and _REDUCTION_MASK.search(mask) is not None


def triton_masked_load_garbage(source: str) -> str | None:
    if not _is_reduction_kernel(source):
        return None

    pointer_types = {m["name"]: m["type"] for m in _SIGNATURE_POINTER.finditer(source)}

    def rewrite(statement: ast.stmt) -> ast.stmt | None:
        transformer = _PaddingGarbage(pointer_types)
        statement = transformer.visit(statement)
        return statement if transformer.changed else None

    return _rewrite_lines(source, rewrite)


# Inductor's `x0 = xindex` (extent `xnumel`) or `x0 = (xindex % K)`; torch_npu's `x0 = x0index` (extent
# `x0numel : tl.constexpr = K`).
_X_DEFINITION = re.compile(
    r"^\s*(?P<var>x\d+) = (?:xindex|(?P<node>x\d+)index|\(xindex % (?P<modulus>\d+)\))\s*$", re.M
)
_LOAD_INDEX = re.compile(r"tl\.load\(\w+ \+ \((?P<index>[^,]*)\),")
_STRIDED_REDUCTION_TERM = re.compile(r"\d+\*r\d*_?(?:\d+|index)")  # `4*r0_1`, `4*r0_index`: the reduced axis strided


def _static_numel(source: str, name: str) -> int | None:
    found = re.search(rf"^\s*{name}\s*(?::\s*tl\.constexpr\s*)?=\s*(\d+)\s*$", source, re.M)
    return int(found.group(1)) if found else None


def _contiguous_narrow_x(source: str) -> tuple[str, int] | None:
    """(x variable, its extent) when the kernel's loads are contiguous along an x axis narrower than NARROW."""
    extents = {}
    for match in _X_DEFINITION.finditer(source):
        if match["modulus"]:
            extent = int(match["modulus"])
        else:
            extent = _static_numel(source, f"{match['node']}numel") if match["node"] else None
            extent = extent if extent is not None else _static_numel(source, "xnumel")
        if extent is not None:
            extents[match["var"]] = extent
    for match in _LOAD_INDEX.finditer(source):
        terms = [t.strip() for t in match["index"].split(" + ")]
        if not any(_STRIDED_REDUCTION_TERM.fullmatch(t) for t in terms):
            continue  # the reduced axis is not strided here: an inner reduction
        for term in terms:
            if term in extents and 2 <= extents[term] < NARROW:
                return term, extents[term]
    return None


def triton_reduction_small_inner(source: str) -> str | None:
    if not _is_reduction_kernel(source):
        return None
    narrow = _contiguous_narrow_x(source)
    if narrow is None:
        return None
    var, extent = narrow
    kept = f"({var} < {max(1, extent // 2)})"

    class Narrowed(ast.NodeTransformer):
        changed = False

        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            if _call(node, "tl.where") and len(node.args) == 3 and _range_mask(node.args[0]):
                node.args[0] = ast.parse(f"({ast.unparse(node.args[0])}) & {kept}", mode="eval").body
                self.changed = True
            return node

    def rewrite(statement: ast.stmt) -> ast.stmt | None:
        transformer = Narrowed()
        statement = transformer.visit(statement)
        return statement if transformer.changed else None

    guarded = _rewrite_lines(source, rewrite)
    return _narrow_unguarded_updates(guarded or source, kept) or guarded


def _narrow_unguarded_updates(source: str, kept: str) -> str | None:
    """Accumulator updates in a reduction loop with no guard (torch_npu elides the `tl.where` when its loads
    are zero-filled: `_tmp2 = tmp3`) keep the accumulator's value outside `kept`: `tl.where(kept, tmp3, _tmp2)`."""

    lines = source.split("\n")
    changed = False
    for body, accumulators in triton_loop_accumulators(lines):
        for number in body:
            statement = _statement(lines[number])
            if not (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
                and statement.targets[0].id in accumulators
            ):
                continue
            if _call(statement.value, "tl.where"):
                continue  # guarded (and narrowed above, when the guard is a range mask)
            name, value = statement.targets[0].id, ast.unparse(statement.value)
            lines[number] = f"{indent_of(lines[number])}{name} = tl.where({kept}, {value}, {name})"
            changed = True
    return "\n".join(lines) if changed else None


# ---------------------------------------------------------------------------
# C++

_CPP_MASKED_REDUCE = re.compile(r"\b(?P<op>max|min|sum|prod|xor_sum|any)_masked_reduce\(")
_CPP_LANE_GUARD = re.compile(r"^\s*if\(C10_(?:UN)?LIKELY\((?P<var>x\d+) >= ")
_CPP_COUNT = re.compile(r"^\s*static_cast<int64_t>\((?P<n>\d+)L?\)\s*$")

_CPP_GARBAGE_HELPERS = f"""
// harness emulation: what masked-off lanes hold when nothing fills them (triton-ascend PR #714):
// NaN in floating vectors, {GARBAGE} in integer ones
template <typename T>
inline T harness_padding_garbage(const T& v, int64_t n) {{
  if constexpr (std::is_constructible_v<T, float>) {{
    using Scalar = typename T::value_type;
    if constexpr (std::numeric_limits<Scalar>::has_quiet_NaN) {{
      return T::set(T(std::numeric_limits<Scalar>::quiet_NaN()), v, n);
    }} else {{
      return T::set(T(static_cast<Scalar>({GARBAGE})), v, n);
    }}
  }} else {{
    return v;
  }}
}}
template <typename T>
inline int64_t harness_all_lanes(const T& v, int64_t n) {{
  if constexpr (std::is_constructible_v<T, float>) {{ return T::size(); }}
  else {{ return n; }}
}}
"""


def _cpp_call_args(text: str, open_paren: int) -> tuple[list[str], int] | None:
    """The top-level arguments of the call whose `(` is at `open_paren`, and the index of its `)`. A `<`
    right after a name opens template arguments (`VectorizedN<float,2>`); comparisons are written spaced."""
    parens, angles, start, args = 0, 0, open_paren + 1, []
    for index in range(open_paren, len(text)):
        char = text[index]
        if char == "(":
            parens += 1
        elif char == ")":
            parens -= 1
            if parens == 0:
                args.append(text[start:index].strip())
                return args, index
        elif char == "<" and (text[index - 1].isalnum() or text[index - 1] in "_:"):
            angles += 1
        elif char == ">" and angles:
            angles -= 1
        elif char == "," and parens == 1 and not angles:
            args.append(text[start:index].strip())
            start = index + 1
    return None


def _rewrite_masked_reduces(source: str, rewrite) -> str | None:
    """Replace each `OP_masked_reduce(acc, v, n)` by `rewrite(op, [acc, v, n], line number)` (None: keep)."""
    lines, changed = source.split("\n"), False
    for number, line in enumerate(lines):
        match = _CPP_MASKED_REDUCE.search(line)
        if match is None:
            continue
        parsed = _cpp_call_args(line, match.end() - 1)
        if parsed is None or len(parsed[0]) != 3:
            continue
        args, close = parsed
        new = rewrite(match["op"], args, number, lines)
        if new is not None:
            lines[number] = line[: match.start()] + new + line[close + 1 :]
            changed = True
    return "\n".join(lines) if changed else None


def _with_helpers(source: str) -> str:
    include = "#include <torch/csrc/inductor/cpp_prefix.h>"
    if include in source:
        return source.replace(include, include + "\n" + _CPP_GARBAGE_HELPERS, 1)
    return _CPP_GARBAGE_HELPERS + source


def cpp_masked_load_garbage(source: str) -> str | None:
    def rewrite(op: str, args: list[str], number: int, lines: list[str]) -> str:
        acc, value, count = args
        return (
            f"{op}_masked_reduce({acc}, harness_padding_garbage({value}, {count}), harness_all_lanes({value}, {count}))"
        )

    rewritten = _rewrite_masked_reduces(source, rewrite)
    return _with_helpers(rewritten) if rewritten is not None else None


def cpp_reduction_small_inner(source: str) -> str | None:

    def rewrite(op: str, args: list[str], number: int, lines: list[str]) -> str | None:
        acc, value, count = args
        width = _CPP_COUNT.match(count)
        if width is None or not 2 <= int(width["n"]) < NARROW:
            return None
        guard = next((m for m in (_CPP_LANE_GUARD.match(lines[n]) for n in range(number - 1, -1, -1)) if m), None)
        declared = cpp_declaration(lines, acc, number)
        if guard is None or declared is None:
            return None
        header = next(
            (n for n in range(number - 1, -1, -1) if re.match(r"^\s*for\(int64_t " + guard["var"] + "=", lines[n])),
            None,
        )
        if header is None or header > declared[0]:
            return None  # the lanes run along the reduced axis: an inner reduction's tail
        keep = max(1, int(width["n"]) // 2)
        return f"{op}_masked_reduce({acc}, {value}, static_cast<int64_t>({keep}L))"

    return _rewrite_masked_reduces(source, rewrite)


REWRITERS = {
    MASKED_LOAD_GARBAGE: {"cpp": cpp_masked_load_garbage, "triton": triton_masked_load_garbage},
    REDUCTION_SMALL_INNER: {"cpp": cpp_reduction_small_inner, "triton": triton_reduction_small_inner},
}

RECOGNISED = {
    MASKED_LOAD_GARBAGE: "Triton reductions whose loads or `tl.where` guards use a reduction range mask "
    "(`r0_mask & xmask`, torch_npu's `r0_mask & x0mask` and `(r0_2mask & r0_1mask) & x0mask`: "
    "a reduced extent that is not a multiple of its block), and C++ reductions with a vector "
    "tail (`sum_masked_reduce(acc, v, n)` and its max/min/prod/xor_sum/any kin)",
    REDUCTION_SMALL_INNER: "outer reductions whose kept, contiguous axis is 2 to 7 wide: Triton reductions "
    "loading `x0 + K*r0_1` with `x0` of extent below 8 (`x0 = xindex`, torch_npu's "
    "`x0 = x0index`) and a range-mask guard or an unguarded accumulator update in a "
    "reduction loop, and C++ reductions vectorized along that axis "
    "(`sum_masked_reduce(acc, v, K)`, K < 8)",
}
