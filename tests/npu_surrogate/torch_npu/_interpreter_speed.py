"""triton-ascend's interpreter, made faster without changing what it computes: the surrogate's Triton and torch_npu
modes run every kernel through it, and four of its habits took most of a run's time (profiled on
`correct_amax_logsumexp` through torch_npu 2.14.0's `triton_experimental`: three kernels on the 40-program grid).

1. `_get_np_dtype` builds a table of 19 Triton dtypes each time it is called (about a million calls a run): here
   the table is built once, the same entries.
2. `_patch_lang` re-patches every builtin of `triton.language` (an `inspect.getmembers` scan of four modules) on
   every call of a `@triton.jit` helper from a kernel (`triton_helpers.min2`, once per loop iteration): here a
   launch (`GridExecutor.__call__`) patches as before, and a helper called during that launch patches only the
   language modules the launch has not patched yet. Patching is idempotent: a patched builtin is never patched
   again.
3. `ReduceOps.generic_reduce`, for a combine function outside Triton's own five (Inductor's argmin, Welford and
   `minimum`; torch_npu's `_min_prop_nan`, below), calls the combine function once per element. Here
   it is called once per position along the reduced axis, on whole slices: `acc = combine(acc, x[k])` for k = 1..n-1,
   the same order for every output element as the element-wise loop, so the same result bit for bit. A combine
   function that takes the truth value of a tensor of more than one element (Python control flow on a value, which
   the element-wise loop evaluates per element) is run element-wise instead.
4. A combine function that is one `minimum` or `maximum` of its two arguments (torch_npu's `_min_prop_nan`, what
   its `min2` reduces with) is numpy's `np.minimum.reduce` / `np.maximum.reduce` along the axis: the interpreter
   computes each of its steps with that very ufunc (`create_minimumf`, `create_minnumf`, `create_minsi`, ... are
   `np.minimum`), and a min or max is one of the elements whatever the order (of a -0.0 and a 0.0 that tie,
   either may be kept). One call, where the element-wise loop made one per element: `triton_unk_fused_amin`'s
   16,384 loop iterations each reduced 16 elements.

`NPU_SURROGATE_INTERPRETER=stock` leaves the interpreter as it ships. `tests/test_npu_path.py` runs registry cases
whose kernels take these paths both ways, in the Triton and the torch_npu mode, and checks that every output is the
same, bit for bit (`tests/npu_interpreter_outputs.py`). On `correct_amax_logsumexp` through torch_npu 2.14.0 the run
took 30.6 s as the interpreter ships and 10.3 s with these (`benchmarks/bench_torch_npu_corpus.py`).
"""

from __future__ import annotations

import os

VARIABLE = "NPU_SURROGATE_INTERPRETER"
STOCK = "stock"
# (what, why): each change, as `docs/npu.md` lists the stand-ins.
SPEED_UPS = (
    ("interpreter._get_np_dtype", "its dtype table built once, not on every call"),
    ("interpreter._patch_lang", "a helper's call skips the language modules its launch has patched already"),
    ("ReduceOps.generic_reduce", "the combine function applied to whole slices along the axis, in the same order"),
    ("ReduceOps.generic_reduce of a minimum/maximum", "np.minimum.reduce / np.maximum.reduce, the ufunc each step is"),
)


def wanted() -> bool:
    return os.environ.get(VARIABLE, "").strip().lower() != STOCK


_installed = False


def install() -> None:
    global _installed
    if _installed or not wanted():
        return
    from triton.runtime import interpreter

    interpreter._get_np_dtype = _dtype_table(interpreter)
    _patch_once_per_launch(interpreter)
    interpreter.ReduceOps.generic_reduce = _sliced_reduce(interpreter)
    _installed = True


def _dtype_table(interpreter):
    import triton.language as tl

    stock = interpreter._get_np_dtype
    table = {}
    for name in dir(tl):
        value = getattr(tl, name)
        if isinstance(value, tl.dtype) and not isinstance(value, (tl.pointer_type, tl.block_type)):
            try:
                table[value] = stock(value)
            except KeyError:  # (a dtype the interpreter has no numpy form of: it still raises, below)
                continue
    uint64 = stock(tl.pointer_type(tl.int8))

    def get_np_dtype(tt_dtype):
        if isinstance(tt_dtype, tl.pointer_type):
            return uint64
        if isinstance(tt_dtype, tl.block_type):
            if isinstance(tt_dtype.element_ty, tl.pointer_type):
                return uint64
            tt_dtype = tt_dtype.element_ty
        found = table.get(tt_dtype)
        return found if found is not None else stock(tt_dtype)

    return get_np_dtype


def _patch_once_per_launch(interpreter) -> None:
    import triton.language as tl

    stock = interpreter._patch_lang
    patched: set[int] = set()  # the language modules patched since the current launch began

    def patch_lang(fn):
        langs = [value for value in fn.__globals__.values() if value is tl or value is tl.core]
        if langs and all(id(lang) in patched for lang in langs):
            return
        stock(fn)
        patched.update(id(lang) for lang in langs)

    launch = interpreter.GridExecutor.__call__

    def launch_patching_afresh(self, *args, **kwargs):
        patched.clear()  # a launch patches as the interpreter does (something may have changed tl since)
        return launch(self, *args, **kwargs)

    for name in ("_surrogate_filters",):  # (another shim's marker on the wrapped method: kept)
        if hasattr(launch, name):
            setattr(launch_patching_afresh, name, getattr(launch, name))
    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = launch_patching_afresh


class _ValueBranch(Exception):
    """The combine function took the truth value of a tensor of several elements."""


_slicing = []  # non-empty while a reduction runs on slices: a tensor's truth must then be of one element


def _sliced_reduce(interpreter):
    import numpy as np
    import triton.language as tl

    elementwise = interpreter.ReduceOps.generic_reduce
    stock_tensor_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor):
        # (the interpreter sets `tensor.__bool__` anew whenever it patches the language: each one is checked)
        stock_tensor_patch(tensor)
        truth = tensor.__bool__

        def truth_of_one(value):
            if _slicing and value.handle.data.size > 1:
                raise _ValueBranch
            return truth(value)

        tensor.__bool__ = truth_of_one

    def generic_reduce(self, input):
        ufunc = _ufunc_of(self.combine_fn, np) if len(input) == 1 else None
        if ufunc is not None and input[0].handle.data.dtype != np.bool_:  # (the interpreter refuses a bool min)
            return _reduce_with(self, input, ufunc, np)
        _slicing.append(True)
        try:
            return _reduce_by_slices(self, input, np, tl)
        except Exception:  # noqa: BLE001 - _ValueBranch, or anything the element-wise loop may answer differently
            pass
        finally:
            _slicing.pop()
        return elementwise(self, input)

    interpreter._patch_lang_tensor = patch_lang_tensor
    return generic_reduce


# What the interpreter computes `minimum`/`maximum` with, whatever their `propagate_nan` (its builder's
# create_minimumf, create_minnumf, create_minsi, ... are all np.minimum or np.maximum).
_UFUNCS = {"minimum": "minimum", "maximum": "maximum"}
_ufuncs_found: dict = {}


def _ufunc_of(combine_fn, np):
    """The numpy ufunc a combine function is, where its body is one `return <tl or core>.minimum(a, b, ...)` (or
    `maximum`) of its two parameters, in order (torch_npu's `_min_prop_nan`); None otherwise."""
    import ast
    import inspect
    import textwrap

    fn = getattr(combine_fn, "fn", None)
    if fn is None:
        return None
    if fn not in _ufuncs_found:
        found = None
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
            (definition,) = tree.body
            params = [a.arg for a in definition.args.args]
            (statement,) = [s for s in definition.body if not isinstance(s, ast.Expr)]  # (a docstring aside)
            call = statement.value if isinstance(statement, ast.Return) else None
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in _UFUNCS
                and len(params) == 2
                and [getattr(a, "id", None) for a in call.args[:2]] == params
                and len(call.args) == 2
                and all(k.arg == "propagate_nan" for k in call.keywords)
            ):
                found = getattr(np, _UFUNCS[call.func.attr])
        except (OSError, TypeError, ValueError, SyntaxError):
            found = None
        _ufuncs_found[fn] = found
    return _ufuncs_found[fn]


def _reduce_with(self, input, ufunc, np):
    """The reduction as numpy's `ufunc.reduce` along the axis: the values the element-wise fold gives (a min or a
    max is one of the elements, whatever the order; of a -0.0 and a 0.0 that tie, either may be kept)."""
    original_axis = self.axis
    (tensor,), axis = self.unravel(input, self.axis)
    data = tensor.handle.data
    reduced = ufunc.reduce(data, axis=axis).astype(data.dtype)
    if self.keep_dims:
        reduced = np.expand_dims(reduced, axis) if original_axis is not None else reduced.reshape((1,) * data.ndim)
    elif original_axis is None:
        reduced = reduced.item()
    return self.to_tensor(reduced, tensor.dtype)


def _reduce_by_slices(self, input, np, tl):
    original_axis = self.axis
    input, axis = self.unravel(input, self.axis)
    datas = [arg.handle.data for arg in input]
    shape = datas[0].shape
    if shape[axis] == 0:
        raise ValueError("an empty axis: the element-wise loop says what it does")
    output_shape = shape[:axis] + shape[axis + 1 :]
    accumulated = [np.take(data, 0, axis=axis).astype(data.dtype, copy=True) for data in datas]
    for k in range(1, shape[axis]):
        acc = tuple(self.to_tensor(a, arg.dtype) for a, arg in zip(accumulated, input))
        current = tuple(self.to_tensor(np.take(data, k, axis=axis), arg.dtype) for data, arg in zip(datas, input))
        result = self.combine_fn.fn(*acc, *current)
        result = result if isinstance(result, tuple) else (result,)
        accumulated = [
            np.broadcast_to(
                np.asarray(r.handle.data if isinstance(r, tl.core.tensor) else r).reshape(
                    output_shape if np.size(r.handle.data if isinstance(r, tl.core.tensor) else r) > 1 else ()
                ),
                output_shape,
            ).astype(data.dtype)
            for r, data in zip(result, datas)
        ]
    ret = []
    for i, data in enumerate(accumulated):
        if self.keep_dims:
            if original_axis is not None:
                data = np.expand_dims(data, axis)
            else:
                for _ in range(len(shape)):
                    data = np.expand_dims(data, 0)
        elif original_axis is None:
            data = data.item()
        ret.append(self.to_tensor(data, input[i].dtype))
    return ret[0] if len(ret) == 1 else tuple(ret)
