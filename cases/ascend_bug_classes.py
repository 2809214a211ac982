"""One small family per triton-ascend silent wrong-result class (`harness/inject/ascend/`).

Each family holds programs the class's emulation hits (tag `hit`: under its
`--inject` they fail, without it they pass) and controls it leaves alone (tag
`control`: under it the run is `injection-missed`, without it they pass).
Select a family by the injection's name: `--tag masked-load-garbage`.
Values are exact small integers where a sum is compared, so a lost lane or a
garbage lane is a wrong value, never noise.
"""

import torch
from torch import nn

from harness import Case, Program, contiguous
from harness.inputs import TensorSpec

INTEGERS = dict(fill="randint", low=-8, high=8)


def scale_and_shift(x):
    return x * 3 + 1


def row_sums(x):
    return x.sum(-1)


def column_sums(x):
    return x.sum(0)


def column_maxima(x):
    return x.amax(0)


def row_softmax(x):
    return torch.softmax(x, -1)


def row_layer_norm(x):
    return torch.nn.functional.layer_norm(x, x.shape[-1:])


def scale_by(x, scale):
    return x * scale + 1


class BroadcastBias(nn.Module):
    """The bias is broadcast over rows: its gradient is a reduction over them (#2292's broadcast-backward rows)."""

    def __init__(self, width: int):
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1, 1, width))

    def forward(self, x):
        return torch.relu(x + self.bias) * x


# Each bug class's sample in the quick run (`--tag quick`).
QUICK = {
    "stores_first_launch_pointwise",
    "stores_masked_tail",
    "scalar_float16_scale",
    "columns_k4_sums",
    "padding_row_sums",
}


def _family(injection, issue, members, compile_options=None):
    return [
        Case(
            name=name,
            build=build,
            tags=("bug-class", injection, role, *extra, *(("quick",) if name in QUICK else ())),
            dtypes=dtypes,
            modes=modes,
            issue=issue,
            description=description,
            compile_options=(compile_options or {}).get(name, {}),
        )
        for name, build, role, dtypes, modes, extra, description in members
    ]


def _program(fn, *specs):
    return lambda dtype: Program(fn, list(specs))


F32 = (torch.float32,)
INFERENCE = ("inference",)

# A kernel whose call autotunes first launches its binaries in the benchmark, on cloned arguments, and the
# program's launch loses nothing: the hit cases are kernels of one config on CUDA too (1-D pointwise kernels
# autotune unless told not to; a persistent row reduction of 256 or more keeps its first config).
FIRST_LAUNCH = _family(
    "first-launch-dropped-stores",
    "triton-ascend #2292",
    [
        (
            "stores_first_launch_pointwise",
            _program(scale_and_shift, contiguous((48, 64))),
            "hit",
            F32,
            INFERENCE,
            (),
            "An elementwise kernel: on its first launch the second half of its output is never written.",
        ),
        (
            "stores_first_launch_row_sums",
            _program(row_sums, contiguous((48, 256), **INTEGERS)),
            "hit",
            F32,
            INFERENCE,
            (),
            "A row-sum reduction: the rows past the group boundary keep stale values on the first launch.",
        ),
        (
            "stores_first_launch_broadcast_grad",
            lambda dtype: Program(BroadcastBias(64).to(dtype), [contiguous((48, 64), requires_grad=True)]),
            "hit",
            F32,
            ("training",),
            ("training",),
            "The gradient of a bias broadcast over rows, a reduction in backward (the report's broadcast-backward "
            "family).",
        ),
    ],
    compile_options={"stores_first_launch_pointwise": {"triton.autotune_pointwise": False}},
)

MASKED_STORE = _family(
    "masked-store-lost",
    "FlagTree #1245",
    [
        (
            "stores_masked_tail",
            _program(scale_and_shift, contiguous((37, 29))),
            "hit",
            F32,
            INFERENCE,
            (),
            "An elementwise float32 kernel of 1073 elements: its stores are masked (C++: a vector tail; "
            "Triton: xmask).",
        ),
        (
            "stores_masked_row_softmax",
            _program(row_softmax, contiguous((64, 20))),
            "hit",
            F32,
            INFERENCE,
            (),
            "Softmax over rows of 20: masked float32 stores of each row's tail.",
        ),
        (
            "stores_masked_half",
            _program(scale_and_shift, contiguous((37, 29))),
            "control",
            (torch.float16,),
            INFERENCE,
            (),
            "The same elementwise kernel in float16: no float32 store, which the class loses.",
        ),
    ],
)

HALF_SCALAR = _family(
    "half-scalar-arg",
    "triton-ascend #2364",
    [
        (
            "scalar_float16_scale",
            _program(
                scale_by,
                contiguous((48, 64)),
                TensorSpec((), dtype=torch.float16, device="cpu", fill="rand", low=1, high=2),
            ),
            "hit",
            F32,
            INFERENCE,
            (),
            "A device tensor scaled by a 0-d float16 CPU tensor, which a kernel takes as a scalar argument.",
        ),
        (
            "scalar_bfloat16_scale",
            _program(
                scale_by,
                contiguous((48, 64)),
                TensorSpec((), dtype=torch.bfloat16, device="cpu", fill="rand", low=1, high=2),
            ),
            "hit",
            F32,
            INFERENCE,
            (),
            "The same with a bfloat16 scalar: its float32 encoding has zero low bits.",
        ),
        (
            "scalar_float32_scale",
            _program(
                scale_by,
                contiguous((48, 64)),
                TensorSpec((), dtype=torch.float32, device="cpu", fill="rand", low=1, high=2),
            ),
            "control",
            F32,
            INFERENCE,
            (),
            "A float32 scalar: packed as it is declared.",
        ),
    ],
)

SMALL_INNER = _family(
    "reduction-small-inner",
    "triton-ascend #2247",
    [
        (
            "columns_k2_sums",
            _program(column_sums, contiguous((512, 2), **INTEGERS)),
            "hit",
            F32,
            INFERENCE,
            (),
            "Column sums of a [512, 2] tensor: a reduction whose tile's contiguous extent is 2 (the report's K_POW2).",
        ),
        (
            "columns_k4_sums",
            _program(column_sums, contiguous((512, 4), **INTEGERS)),
            "hit",
            F32,
            INFERENCE,
            (),
            "Column sums of a [512, 4] tensor.",
        ),
        (
            "columns_k4_maxima",
            _program(column_maxima, contiguous((512, 4), **INTEGERS)),
            "hit",
            F32,
            INFERENCE,
            (),
            "Column maxima of a [512, 4] tensor: the dropped lanes keep -inf.",
        ),
        (
            "columns_k8_sums",
            _program(column_sums, contiguous((512, 8), **INTEGERS)),
            "control",
            F32,
            INFERENCE,
            (),
            "Column sums of a [512, 8] tensor: an inner extent of 8, which the report counts correctly.",
        ),
    ],
)

PADDING = _family(
    "masked-load-garbage",
    "triton-ascend PR #714",
    [
        (
            "padding_row_sums",
            _program(row_sums, contiguous((64, 20), **INTEGERS)),
            "hit",
            F32,
            INFERENCE,
            (),
            "Row sums over 20 elements: the reduction's block (Triton 32, C++ 16 + a tail of 4) has masked lanes.",
        ),
        (
            "padding_row_softmax",
            _program(row_softmax, contiguous((64, 20))),
            "hit",
            F32,
            INFERENCE,
            (),
            "Softmax over rows of 20: a max and a sum reduction over masked lanes.",
        ),
        (
            "padding_row_layer_norm",
            _program(row_layer_norm, contiguous((64, 20))),
            "hit",
            F32,
            INFERENCE,
            (),
            "Layer norm over rows of 20: mean and variance reductions over masked lanes.",
        ),
        (
            "padding_row_sums_aligned",
            _program(row_sums, contiguous((64, 32), **INTEGERS)),
            "control",
            F32,
            INFERENCE,
            (),
            "Row sums over 32 elements: whole blocks, no masked lane.",
        ),
    ],
)

CASES = [*FIRST_LAUNCH, *MASKED_STORE, *HALF_SCALAR, *SMALL_INNER, *PADDING]
