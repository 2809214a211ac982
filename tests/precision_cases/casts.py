"""Programs that round on purpose: an explicit cast to float16 or bfloat16 that Inductor fuses into a kernel and
keeps in float32 (`torch._inductor.config.emulate_precision_casts` keeps eager's rounding). Each fails compiled
against eager on the CPU (torch 2.13) and is right with that switch on."""

import torch

from harness import Program, case, contiguous


def half_round_trip(x):
    return (x.half().float() * 3.0).sum(-1)


@case(tags=("precision-cast",), dtypes=(torch.float32,), modes=("inference",))
def cast_round_trip(dtype):
    """x.half().float(): a round trip through float16, then a reduction."""
    return Program(half_round_trip, [contiguous((64, 256))])


def bfloat16_then_add(x, z):
    return x.to(torch.bfloat16) + z


@case(tags=("precision-cast",), dtypes=(torch.float32,), modes=("inference",))
def cast_before_add(dtype):
    """x.to(bfloat16) + z (float32, so the sum is float32): eager rounds x before the add."""
    return Program(bfloat16_then_add, [contiguous((64, 256)), contiguous((64, 256))])


def matmul_bfloat16_plus_bias(a, b, bias):
    return (a @ b).to(torch.bfloat16) + bias


@case(tags=("precision-cast",), dtypes=(torch.float32,), modes=("inference",))
def cast_matmul_plus_bias(dtype):
    """A matmul's result in bfloat16, added to a float32 bias (promoted back to float32)."""
    return Program(matmul_bfloat16_plus_bias, [contiguous((32, 64)), contiguous((64, 48)), contiguous((48,))])


def bfloat16_then_float16(x):
    return x.to(torch.bfloat16).to(torch.float16) * 3


@case(tags=("precision-cast",), dtypes=(torch.float32,), modes=("inference",))
def cast_chain_folded(dtype):
    """x.to(bfloat16).to(float16): Inductor's `pointless_convert` folds the chain into one cast to float16 before
    any kernel sees it, so the bfloat16 rounding is gone (kept with emulate_precision_casts)."""
    return Program(bfloat16_then_float16, [contiguous((64, 256))])
