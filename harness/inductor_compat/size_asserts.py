"""Inductor's own check that a fallback's result has the layout its meta gave: its failure, read.

The wrapper Inductor writes asserts, after each fallback call, that the result has the size and stride its meta
(fake) kernel gave (`assert_size_stride(buf, size, stride, op)`, where `config.size_asserts` is on): the kernels
after it address the result with those strides. The assert is torch's (`torch/csrc/dynamo/guards.cpp`,
`assert_size_stride`, torch 2.6 to 2.13); it raises AssertionError whose message gives, dim by dim, "expected size
A==B, stride C==D at dim=N" (A and C the tensor's, B and D the meta's) and "Error in op: <op>". Read here: the op
and the message's first line, nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SIZE_ASSERTS_OPTION = "size_asserts"
CONFIG_KEY = "torch._inductor.config.size_asserts"


@dataclass(frozen=True)
class LayoutAssert:
    op: str | None  # the fallback's op (`torch.ops.aten.copysign.Tensor`), where the message names it
    said: str  # the message's first line: each dim whose size or stride differs


def layout_assert(exc: BaseException) -> LayoutAssert | None:
    """The failed `assert_size_stride` in `exc`'s chain of causes; None where there is none."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if isinstance(exc, AssertionError) and re.search(r"expected size \S+==\S+, stride \S+==\S+ at dim=", text):
            op = re.search(r"Error in op: (\S+)", text)
            return LayoutAssert(op.group(1) if op else None, text.strip().splitlines()[0])
        exc = exc.__cause__ or exc.__context__
    return None
