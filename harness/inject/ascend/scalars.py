"""`half-scalar-arg` (triton-ascend #2364; fix in PR #2285): float16/bfloat16 scalar kernel arguments are
compiled as 16-bit parameters, while the launcher writes their float32 bytes into the argument packet. The
kernel reads the first two bytes, the low 16 bits of the float32 encoding: 1.5 arrives as 0.0, and every
bfloat16 value as +-0.0 (its float32 form has zero low bits).

Inductor reaches this path with 0-d CPU tensors used by a device program (graph inputs that
`GraphLowering.is_unspec_arg` unwraps; a learning rate, a step count, a scale):

- Triton (CUDA): the wrapper passes `argN.item()`, a Python float. Inductor's
  `signature_of` (torch/_inductor/codegen/triton_utils.py, read in torch
  2.13) declares such float16/bfloat16 scalars as fp32, which dodges the bug;
  torch_npu's Triton codegen (2.14.0) calls the same function. A backend that keeps
  their own type meets it. The emulation changes the value where the launch
  passes it.
- C++ (CPU): the 0-d tensor is passed by pointer and read as a scalar
  (`in_ptr1[0]`); the emulation hands the kernel a copy holding the value as
  it would arrive.

A hit is a launch with such an argument; a run without one is `injection-missed`.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.inductor_compat import ROLE_IN, Launch
from harness.records import InjectionStats

HALF_DTYPES = (torch.float16, torch.bfloat16)
# Wrapper locals that are graph inputs: inference `arg0_1`, training `primals_1` / `tangents_1`.
GRAPH_INPUT_PREFIXES = ("arg", "primals_", "tangents_")


def arrives_as(value: float, dtype: torch.dtype) -> float:
    """What a kernel with a 16-bit `dtype` parameter reads when the launcher packs `value` as float32."""
    low_bits = torch.tensor([value], dtype=torch.float32).view(torch.int32) & 0xFFFF
    return low_bits.to(torch.int16).view(dtype).item()  # int32 -> int16 keeps the low 16 bits


class HalfScalarArg:
    def __init__(self, selector: str | None = None):
        self.stats = InjectionStats(hits=[])
        # kernel -> {argument position: its 16-bit dtype}, found on its first launch: replays carry no wrapper locals.
        self._positions: dict[int, dict[int, torch.dtype]] = {}

    def missed(self) -> str | None:
        if self.stats.hits:
            return None
        return (
            f"none of the {self.stats.launches} kernel launches took a float16/bfloat16 scalar: a 0-d CPU "
            "tensor of that dtype, a graph input, used by the compiled program"
        )

    def __call__(self, launch: Launch) -> Any:
        self.stats.launches += not launch.replay
        if launch.kernel.kind == "extern":
            return launch.run()
        positions = self._positions.get(id(launch.kernel))
        if positions is None or not launch.replay:
            positions = self._positions[id(launch.kernel)] = self._half_scalars(launch)
        if not positions:
            return launch.run()
        args = list(launch.args)
        for position, dtype in positions.items():
            value = args[position]
            if isinstance(value, torch.Tensor):
                args[position] = torch.full_like(value, arrives_as(float(value.item()), dtype))
            else:
                args[position] = arrives_as(float(value), dtype)
        if not launch.replay:
            self.stats.hits.append(f"{launch.index}:{launch.kernel.name}")
        return launch.run(args)

    @staticmethod
    def _half_scalars(launch: Launch) -> dict[int, torch.dtype]:
        scalars = [
            value
            for name, value in launch.caller_locals.items()
            if name.startswith(GRAPH_INPUT_PREFIXES)
            and isinstance(value, torch.Tensor)
            and value.dim() == 0
            and value.device.type == "cpu"
            and value.dtype in HALF_DTYPES
        ]
        found = {}
        for position, arg in enumerate(launch.args):
            if isinstance(arg, torch.Tensor):
                if launch.role(position) == ROLE_IN and any(arg is s for s in scalars):
                    found[position] = arg.dtype
            elif isinstance(arg, float):  # Triton: the wrapper passed `argN.item()`
                dtypes = {s.dtype for s in scalars if s.item() == arg}
                if len(dtypes) == 1:
                    found[position] = dtypes.pop()
        return found
