"""What the surrogate cannot run, told apart from a program that is wrong: `unsupported(exc)`.

An exception that comes from the surrogate's own limits gets a one-line reason naming the missing piece, and the
harness makes the run a skip with it (`harness.devices.Npu.unsupported`): not a compile error, and never a verdict
on the compiler. Anything else is None, and stays the error it is. Each limit is recognised by what raised it,
never by the case:

- triton-ascend 3.2.0's interpreter runs a builtin only where it patches it (`_patch_lang`: `tl`, `tl.math`), or
  where the surrogate gives it a numpy form (`_triton_codegen.NUMPY_LIBDEVICE`); a libdevice function with
  neither raises `InterpreterLimit`, another builtin "`_builder` argument must be provided outside of JIT
  functions" (`triton/language/core.py`): the reason quotes the kernel's line.
- Operations its builder lacks (`'InterpreterBuilder' object has no attribute 'create_mod'`: an integer `%`), and
  an extern elementwise call (`create_extern_elementwise`, which raises "extern_elementwise not supported in
  interpreter mode": `triton/runtime/interpreter.py` line 627).
- Its scans and sorts (`tl.associative_scan`, Inductor's `triton_helpers.sort_with_index`) fail inside the
  interpreter (`TypeError: 'int' object is not iterable` for a scan's combine function).
- A CANN operator the compiled program calls (`torch.ops.npu.*` without a kernel here): "Could not run 'npu::...'".
- In the torch_npu mode: a CANN extension a kernel calls (`_wheel_backend.CannExtensionMissing`), and an entry of
  torch_npu's C extension that has no stand-in (`_wheel_backend._StrictModule`).
"""

from __future__ import annotations

import re
import traceback

from . import _triton_codegen, _wheel_backend

INTERPRETER = "triton-ascend 3.2.0's interpreter"


def unsupported(exc: BaseException) -> str | None:
    for link in _chain(exc):
        text = str(link)
        if isinstance(link, _triton_codegen.InterpreterLimit):
            return f"{INTERPRETER} cannot run a builtin the kernel calls: {text}"
        if isinstance(link, _wheel_backend.CannExtensionMissing):
            return f"a kernel calls a CANN extension the surrogate lacks: {text}"
        if isinstance(link, AttributeError) and _wheel_backend.NO_STAND_IN in text:
            return f"the surrogate has no stand-in for a piece of torch_npu proper: {text}"
        found = re.search(r"Could not run '(npu::[\w.]+)'", text)
        if found:
            return f"the program calls the CANN operator {found.group(1)}, which has no kernel on the surrogate"
        if "extern_elementwise not supported in interpreter mode" in text:
            line = _kernel_line(link)
            called = f" (`{line}`)" if line else ""
            return f"{INTERPRETER} cannot run an extern elementwise call{called}: its builder has none"
        missing = re.search(r"'InterpreterBuilder' object has no attribute '(\w+)'", text)
        if missing:
            return f"{INTERPRETER} has no {missing.group(1)} (the operation the kernel's `{_kernel_line(link)}` needs)"
        if "`_builder` argument must be provided outside of JIT functions" in text:
            line = _kernel_line(link)
            called = f" (`{line}`)" if line else ""
            return f"{INTERPRETER} cannot run a builtin the kernel calls{called}: it patches only tl and tl.math"
        if type(link).__name__ == "InterpreterError" or _in_interpreter(link):
            lines = " ".join(_kernel_lines(link))
            for builtin in ("associative_scan", "sort_with_index", "sort"):
                if re.search(rf"\b{builtin}\b", lines):
                    return f"{INTERPRETER} cannot run {builtin} (the kernel's scan or sort fails inside it: {text})"
    return None


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _in_interpreter(exc: BaseException) -> bool:
    return any("triton/runtime/interpreter.py" in frame.filename for frame in traceback.extract_tb(exc.__traceback__))


def _kernel_lines(exc: BaseException) -> list[str]:
    """The lines of generated kernels (Inductor's code cache) the exception's traceback passed through."""
    return [
        (frame.line or "").strip()
        for link in _chain(exc)
        for frame in traceback.extract_tb(link.__traceback__)
        if "torchinductor" in frame.filename or frame.name.startswith("triton_")
    ]


def _kernel_line(exc: BaseException) -> str | None:
    lines = [line for line in _kernel_lines(exc) if line]
    return lines[-1] if lines else None
