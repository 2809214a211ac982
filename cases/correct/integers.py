"""Correct programs: integer and bool results, which must match eager exactly.

argmax/argmin over float and integer inputs, comparisons and where, cumsum
and reductions on int64/int32, bool logic with any/all/count_nonzero. Integer
arithmetic has no rounding, so any difference at all would be a bug.
"""

import torch

from harness import KnownFailure, Program, case, contiguous, permuted

INTS = (torch.int64, torch.int32)
# Found by this corpus on a GPU host's CPU (AVX512, torch 2.11.0; new, not yet reported upstream): the one
# kernel Inductor fuses for every output here writes, in 91-94% of rows, x.argmax(-1) rounded down to a
# multiple of 16 (the start of the 16-lane vector holding the maximum: 869 becomes 864). The same program
# compiled without the harness fails the same way there, and `x.argmax(-1)` compiled alone is right.
# AVX2 CPUs (torch 2.13) compute it right: not strict, whether it shows depends on the CPU.
FUSED_ARGMAX_AVX512 = KnownFailure(
    "the fused argmax/argmin kernel returns the row maximum's 16-lane vector start, not its index, on an AVX512 "
    "CPU (seen with torch 2.11; new, not yet reported upstream)",
    device="cpu",
    torch="2.11",
    strict=False,
)


def argmax_and_compare(x, y):
    return (
        x.argmax(dim=-1),
        x.argmin(dim=0),
        torch.argmax(x.view(-1)),
        x > y,
        torch.where(x >= y, x, y),
        (x == y).sum(dim=-1),
    )


@case(
    tags=("correct", "integer", "argmax", "compare"),
    dtypes=(torch.float32,),
    modes=("inference",),
    known_failures=[FUSED_ARGMAX_AVX512],
)
def correct_argmax_compare_float(dtype):
    """argmax/argmin (int64 results) over 1024- and 256-long dims of distinct floats, comparisons, where."""
    return Program(
        argmax_and_compare,
        [
            contiguous((256, 1024)),
            permuted((1024, 256), (1, 0)),
        ],
    )


@case(
    tags=("correct", "integer", "argmax", "compare"),
    dtypes=INTS,
    modes=("inference",),
    known_failures=[FUSED_ARGMAX_AVX512],
)
def correct_argmax_compare_int(dtype):
    """argmax/argmin over integers with many ties (the first index must win), comparisons, where."""
    return Program(
        argmax_and_compare,
        [
            contiguous((256, 1024), fill="randint", low=-500, high=500),
            permuted((1024, 256), (1, 0), fill="randint", low=-500, high=500),
        ],
    )


def int_cumsum(x):
    return torch.cumsum(x, dim=-1), torch.cumsum(x, dim=0), torch.cumprod(x[:, :12].clamp(-3, 3), dim=1)


@case(tags=("correct", "integer", "cumsum", "scan"), dtypes=INTS, modes=("inference",))
def correct_int_cumsum(dtype):
    """cumsum along both dims (int32 promotes to int64) and a short cumprod, on integers."""
    return Program(int_cumsum, [contiguous((64, 1000), fill="randint", low=-1000, high=1000)])


def int_reductions_where(x, y):
    masked = torch.where(x > 0, x * 3, -y)
    return (
        masked.sum(dim=-1),
        masked.amax(dim=0),
        x.amin(dim=(0, 1)),
        (x % 7 == 0).sum(dim=0),
        torch.where(x > y, x, y).prod(dim=-1).remainder(1000003),
        x // 3 + y % 5,
    )


@case(tags=("correct", "integer", "where", "reduction"), dtypes=INTS, modes=("inference",))
def correct_int_where_reductions(dtype):
    """where, sum/amax/amin/prod reductions over 512-long dims, floor division and remainder, on integers."""
    return Program(
        int_reductions_where,
        [
            contiguous((128, 512), fill="randint", low=-20, high=20),
            contiguous((128, 512), fill="randint", low=-20, high=20),
        ],
    )


def bool_logic(a, b, x):
    both = a & b
    either = torch.logical_or(a, b)
    flipped = ~a ^ b
    return (
        both,
        either.any(dim=-1),
        flipped.all(dim=0),
        torch.count_nonzero(both, dim=-1),
        torch.where(either, x, torch.zeros_like(x)).sum(dim=-1),
        both.long().cumsum(dim=-1),
    )


@case(tags=("correct", "integer", "bool"), dtypes=(torch.int64,), modes=("inference",))
def correct_bool_logic(dtype):
    """&, |, ^, ~ on bool tensors, any/all/count_nonzero over 768-long dims, where over integers, bool cumsum."""
    return Program(
        bool_logic,
        [
            contiguous((96, 768), dtype=torch.bool),
            contiguous((96, 768), dtype=torch.bool),
            contiguous((96, 768), fill="randint", low=-100, high=100),
        ],
    )


def float_to_int(x):
    buckets = torch.bucketize(x, torch.linspace(-2, 2, 9, device=x.device, dtype=x.dtype))
    return buckets, (x * 10).round().to(torch.int64).sum(dim=-1), (x > 0).to(torch.int32).cumsum(dim=-1)


@case(tags=("correct", "integer", "compare", "bucketize"), dtypes=(torch.float32,), modes=("inference",))
def correct_float_to_int(dtype):
    """bucketize, round-and-cast sums and sign cumsums: integer results computed from floats."""
    return Program(float_to_int, [contiguous((64, 1024))])
