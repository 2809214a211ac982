"""The surrogate's memory checker: every load and store a kernel makes through triton-ascend's interpreter lands in
one of the buffers the launch was given, or the launch stops there, naming the kernel, the argument, the offset
and the buffer's size.

On an NPU a store past a buffer's end corrupts device memory silently; in the interpreter it writes the host heap
(the interpreter's `_interpreter.store` writes through raw addresses), and the case's process dies later with
SIGSEGV or SIGABRT, nothing named. Here the surrogate owns every buffer a launch gets: each tensor argument's
storage (`GridExecutor._init_args_hst`, shim 7 of `_triton_codegen`), and each unmasked lane's address is checked
against them before the interpreter reads or writes it.

One more change to the interpreter's stores, since the checker found it: an integer store writes the pointer's
element type, as Triton's compiled `tl.store` does, where the interpreter wrote the value's own numpy dtype (the
int64 its `tl.sum` of int32 gives).

An access outside every buffer raises `OutOfBounds`, which names the argument whose buffer starts nearest below the
address (the one a pointer computed past its end started from) and how far past its end the access reaches.
"""

from __future__ import annotations

import os
import threading

# `NPU_SURROGATE_MEMCHECK=0` leaves accesses unchecked (to measure the checker's cost); stores still write their
# pointer's element type.
VARIABLE = "NPU_SURROGATE_MEMCHECK"

_launch = threading.local()  # .kernel (its name), .buffers [(argument, start, end)], for the launch under way


class OutOfBounds(RuntimeError):
    """A kernel loaded or stored outside every buffer its launch was given. `memory_violation` says it in the
    fields the harness reads (`harness.run.errors.MemoryViolation`): the run is a failure naming the kernel."""

    def __init__(self, message: str, violation: dict):
        super().__init__(message)
        self.memory_violation = violation


def launch_began(kernel: str, buffers: list[tuple[str, int, int]]) -> None:
    checked = os.environ.get(VARIABLE, "").strip() != "0"
    _launch.kernel, _launch.buffers = kernel, sorted(buffers, key=lambda b: b[1]) if checked else None


def launch_ended() -> None:
    _launch.kernel, _launch.buffers = None, None


def install(interpreter) -> None:
    import numpy as np

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_masked_store, "_surrogate_checks", False):
        return
    load, store, rmw = builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw

    def checked_load(self, ptrs, mask, other, *args):
        _check("load from", ptrs.data, mask.data, interpreter._get_np_dtype(ptrs.get_element_ty()).itemsize, np)
        return load(self, ptrs, mask, other, *args)

    def checked_store(self, ptrs, value, mask, *args):
        # A store writes the pointer's element type, as a compiled store does. The interpreter's `tl.sum` of int32
        # gives numpy's int64 under an int32 label (`ReduceOps.sum`: `np.sum` widens), so the frontend's cast to the
        # pointer's type does nothing, and the interpreter wrote 8 bytes into each 4-byte element: past the end of
        # the int32 buffers torch_npu's launcher narrows int64 outputs to (`triton_unk_fused_ones_sum`). The int32
        # sum the compiled kernel makes wraps as this narrowing does.
        pointed = interpreter._get_np_dtype(ptrs.get_element_ty())
        if value.data.dtype.kind in "iu" and pointed.kind in "iu" and value.data.dtype.itemsize != pointed.itemsize:
            value = interpreter.TensorHandle(value.data.astype(pointed), ptrs.get_element_ty())
        _check("store to", ptrs.data, mask.data, pointed.itemsize, np)
        return store(self, ptrs, value, mask, *args)

    def checked_rmw(self, op, ptr, val, mask, *args):
        _check("atomic update of", ptr.data, mask.data, val.data.dtype.itemsize, np)
        return rmw(self, op, ptr, val, mask, *args)

    for method in (checked_load, checked_store, checked_rmw):
        method._surrogate_checks = True
    builder.create_masked_load, builder.create_masked_store = checked_load, checked_store
    builder.create_atomic_rmw = checked_rmw


def _check(access: str, addresses, mask, size: int, np) -> None:
    buffers = getattr(_launch, "buffers", None)
    if not buffers:
        return
    wanted = np.broadcast_to(addresses, np.shape(mask))[np.asarray(mask, dtype=bool)].astype(np.uint64, copy=False)
    if wanted.size == 0:
        return
    low, high = int(wanted.min()), int(wanted.max()) + size
    if any(start <= low and high <= end for _, start, end in buffers):
        return
    for address in np.unique(wanted):
        address = int(address)
        if any(start <= address and address + size <= end for _, start, end in buffers):
            continue
        below = [b for b in buffers if b[1] <= address]
        name, start, end = below[-1] if below else buffers[0]
        where = f"{address + size - end} bytes past its end" if below else f"{start - address} bytes before its start"
        violation = {
            "kernel": _launch.kernel,
            "access": access,
            "argument": name,
            "offset": address - start,
            "element_bytes": size,
            "buffer_bytes": end - start,
            "beyond": where,
            "line": _kernel_line(_launch.kernel),
        }
        raise OutOfBounds(
            f"{_launch.kernel}: a {access} a {size}-byte element at byte offset {address - start} of {name}, "
            f"a buffer of {end - start} bytes: {where}",
            violation,
        )


def _kernel_line(kernel: str | None) -> str | None:
    """The kernel's source line making the access: the interpreter runs the kernel's Python function, so its frame
    is on the stack, at that line."""
    import linecache
    import sys

    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == kernel:
            return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip() or None
        frame = frame.f_back
    return None
