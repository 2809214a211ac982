"""The emulation a plain script carries inline, so that `plain_repro.py` is written under `--inject` too.

A plain script imports torch and nothing of the harness. Under an injection it can still show the divergence
when the injection changes each launch in a way a few lines of torch can say: the NPU launcher's 64-bit
narrowing (`boundary-downcast`), dense copies handed to a kernel (`fault-stride-collapse`), and the output
corruptions of `fault-*@KERNEL` on generated kernels. Those lines go into the script, with a comment saying what
they emulate, and wrap every generated kernel through Inductor's module loader
(`torch._inductor.codecache.PyCodeCache.load_by_key_path`, torch 2.6 to 2.13), as the harness does.

What changes a kernel's generated source (the rewritten reductions, the masked-lane classes), fallback calls
(`@aten:`), the wrapper's glue, first launches or random lanes is not carried: `why_not` says why, and the
console line shows it.
"""

from __future__ import annotations

import textwrap

from harness.inductor_compat import launches

# Corruption -> the statement applied to each tensor a selected launch writes (`t`), as inject.launch.CORRUPTIONS does.
_CORRUPTIONS = {
    "scale": "t.logical_not_() if t.dtype == torch.bool else t.mul_(2)",
    "offset": "t.logical_not_() if t.dtype == torch.bool else t.add_(1)",
    "zero-tail": "t.masked_fill_(torch.arange(t.numel(), device=t.device).reshape(t.shape) >= t.numel() // 2, 0)",
    "nan": (
        "t.masked_fill_(torch.arange(t.numel(), device=t.device).reshape(t.shape) == 0, False if t.dtype == "
        "torch.bool else float('nan') if t.is_floating_point() else torch.iinfo(t.dtype).min)"
    ),
    "ulp": (
        "t.copy_(torch.nextafter(t, torch.full_like(t, float('inf')))) if t.is_floating_point() else "
        "(t.logical_not_() if t.dtype == torch.bool else t.add_(1))"
    ),
}

_NARROWING = "{torch.int64: torch.int32, torch.float64: torch.float32}"


def why_not(injection: str) -> str | None:
    """None when a plain script can carry `injection` inline, else why it cannot (one clause)."""
    name, _, selector = injection.partition("@")
    if name == "boundary-downcast" or (name == "fault-stride-collapse" and selector):
        return None
    if name.startswith("fault-") and name.removeprefix("fault-") in _CORRUPTIONS:
        if selector.startswith("aten:"):
            return "a fault on a fallback call needs the harness's view of the wrapper's op calls"
        return None
    if name == "boundary-downcast-strided":
        return "the proposed fix shares one conversion buffer among arguments of a storage, which is not carried"
    if name == "glue-offset-dropped":
        return "the emulated wrapper glue acts on fallback calls, which a script cannot reach without the harness"
    return f"{name} rewrites the generated kernels or tracks launches in ways only the harness carries"


def text(injection: str) -> str:
    """The script's emulation: `emulated_launches()`, a context manager under which every generated kernel the
    compiled call loads is launched through `emulate`. `why_not(injection)` must be None."""
    name, _, selector = injection.partition("@")
    if name == "boundary-downcast":
        summary = (
            "Emulates the Ascend NPU's kernel launcher (torch_npu's triton_experimental backend): int64 and "
            "float64 tensor arguments are narrowed to int32/float32 with Tensor.to() (a non-dense layout "
            "collapses to a dense copy), the kernel keeps its compile-time strides over that copy, and "
            "what it writes is copied back."
        )
        emulate = _CONVERT.format(narrowing=_NARROWING, selector="*")
    elif name == "fault-stride-collapse":
        summary = (
            "An injected fault, not a compiler bug: the selected kernel receives dense copies of its tensor "
            "arguments and keeps its compile-time strides over them."
        )
        emulate = _CONVERT.format(narrowing="{}", selector=selector)
    else:
        corruption = name.removeprefix("fault-")
        summary = f"An injected fault, not a compiler bug: {name} corrupts what the selected kernel writes."
        emulate = _CORRUPT.format(selector=selector, corruption=_CORRUPTIONS[corruption])
    head = "\n".join(
        f"# {line}"
        for line in textwrap.wrap(
            summary + " Run with --without-emulation to see the compiled program match eager.", 100
        )
    )
    # The C++ kernels are found as the harness finds them (`launches._cpp_kernel_params`): its patterns, written in.
    loader = _LOADER.replace("CPP_KERNEL_PATTERN", repr(launches.CPP_KERNEL.pattern)).replace(
        "CPP_SIGNATURE_PATTERN", repr(launches.CPP_SIGNATURE.pattern)
    )
    return "\n".join([f"# --- Emulation ({injection}) ---", head, "", emulate.strip(), "", "", loader.strip(), ""])


_CONVERT = '''
NARROWED = {narrowing}  # dtype -> its narrowed dtype (empty: all tensor arguments, dtypes kept)
SELECTED = {selector!r}  # the kernels this applies to (a name glob)


def emulate(name, kind, arg_names, mutated, args, call):
    """One launch of a generated kernel, its tensor arguments converted as described above."""
    if not fnmatch.fnmatchcase(name, SELECTED):
        return call(args)
    write_backs = []
    for position, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor) or (NARROWED and arg.dtype not in NARROWED):
            continue
        role = _role(arg_names, position, mutated)
        narrow = NARROWED.get(arg.dtype, arg.dtype)
        # A Triton output that is not also read starts empty; a C++ kernel's output may start from its contents.
        fresh = role == "out" and kind == "triton"
        converted = torch.zeros_like(arg, dtype=narrow) if fresh else arg.detach().to(narrow, copy=True)
        # The kernel addresses the copy with the argument's own strides, possibly past the copy's end.
        extent = 1 + sum((n - 1) * s for n, s in zip(arg.shape, arg.stride())) if arg.numel() else 0
        buffer = torch.zeros(max(converted.numel(), extent), dtype=arg.dtype, device=arg.device)
        buffer[: converted.numel()] = converted.as_strided((converted.numel(),), (1,)).to(arg.dtype)
        args[position] = buffer.as_strided(arg.shape, arg.stride())
        if role != "in":
            write_backs.append((arg, buffer.as_strided(converted.shape, converted.stride()), narrow))
    result = call(args)
    for original, logical, narrow in write_backs:
        original.copy_(logical.to(narrow).to(original.dtype))
    return result
'''

_CORRUPT = '''
SELECTED = {selector!r}  # the kernels this applies to (a name glob)


def emulate(name, kind, arg_names, mutated, args, call):
    """One launch of a generated kernel; a selected one has what it writes corrupted."""
    result = call(args)
    if fnmatch.fnmatchcase(name, SELECTED):
        for position, t in enumerate(args):
            if isinstance(t, torch.Tensor) and _role(arg_names, position, mutated) != "in":
                {corruption}
    return result
'''

_LOADER = '''
def _role(arg_names, position, mutated):
    name = arg_names[position] if position < len(arg_names) else ""
    if name.startswith("in_out_ptr") or name in mutated:
        return "inout"
    return "out" if name.startswith("out_ptr") else "in"


_CPP_KERNEL = re.compile(CPP_KERNEL_PATTERN, re.S | re.M)
_CPP_SIGNATURE = re.compile(CPP_SIGNATURE_PATTERN, re.S)
_active = []


def _launcher(name, kind, arg_names, mutated, call):
    def launch(*args, **kwargs):
        if not _active:
            return call(*args, **kwargs)
        return emulate(name, kind, arg_names, mutated, list(args), lambda given: call(*given, **kwargs))
    return launch


def _wrap_kernels(module):
    """Route each generated kernel of a wrapper module Inductor loaded through `emulate` (once per module)."""
    if vars(module).get(_MARK):
        return
    setattr(module, _MARK, True)
    with open(module.__file__) as handle:
        source = handle.read()
    cpp = {}
    for match in _CPP_KERNEL.finditer(source):
        signature = _CPP_SIGNATURE.search(match.group(2))
        params = signature.group(1).split(",") if signature else []
        cpp[match.group(1)] = [p.strip().split()[-1].lstrip("*&") for p in params if p.strip()]
    for name, value in list(vars(module).items()):
        if name in cpp and callable(value):
            setattr(module, name, _launcher(name, "cpp", cpp[name], (), value))
        elif hasattr(value, "run") and hasattr(getattr(value, "fn", None), "arg_names"):  # a Triton kernel
            signature = value.triton_meta.get("signature", {})
            names = [n for n in value.fn.arg_names if signature.get(n) != "constexpr"]
            mutated = getattr(value, "mutated_arg_names", None) or value.inductor_meta.get("mutated_arg_names", ())
            value.run = _launcher(name, "triton", names, set(mutated), value.run)


_MARK = f"__emulated_{id(_active):x}__"


@contextlib.contextmanager
def emulated_launches():
    """Every generated kernel loaded or launched inside the block goes through `emulate`."""
    original = PyCodeCache.load_by_key_path.__func__

    def load_by_key_path(cls, *args, **kwargs):
        module = original(cls, *args, **kwargs)
        _wrap_kernels(module)
        return module

    PyCodeCache.load_by_key_path = classmethod(load_by_key_path)
    _active.append(True)
    try:
        yield
    finally:
        _active.pop()
        PyCodeCache.load_by_key_path = classmethod(original)
'''

# What the script imports for it: the standard library's, and Inductor's loader (after `import torch`).
STDLIB_IMPORTS = ["import contextlib", "import fnmatch", "import re"]
TORCH_IMPORTS = ["from torch._inductor.codecache import PyCodeCache  # Inductor's module loader (torch 2.6 to 2.13)"]
