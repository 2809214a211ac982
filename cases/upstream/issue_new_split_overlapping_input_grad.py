"""new (not yet reported): [aot_autograd] the gradient of split() outputs of an input whose rows overlap differs from eager.

Found by the OpInfo sweep (`opinfo-split-float32-s0-overlapping`, training; no upstream issue found yet).

`x.split(2)` of a (4, 4) leaf that requires grad and is an overlapping view
(`storage.as_strided((4, 4), (2, 1))`: consecutive rows share two elements).
Eager's SplitBackward gives every element of `x` its own gradient (autograd
does not look at memory overlap); compiled, AOTAutograd regenerates the
outputs (views of the input) from the input's storage and their backward
scatters into that storage, so elements that share an address get each
other's contributions: `grad_in0` differs in 4 of its 16 elements. `aot_eager`
already differs (culprit: the AOT stage, not an Inductor kernel). `x[:2]`,
`unbind`, `t()` on the same input agree with eager; a non-overlapping input
agrees too. Seen on torch 2.13.0+cpu; device independent.
"""

import torch

from harness import KnownFailure, Program, case, strided

ISSUE = "new: not yet reported upstream (found by the OpInfo sweep, split of an overlapping input, training)"


def split_in_two(x):
    return x.split(2)


@case(
    tags=("upstream", "aot_autograd", "view", "layout", "overlapping", "training"),
    dtypes=(torch.float32,),
    modes=("training",),
    issue=ISSUE,
    culprit="stage:aot_eager",
    known_failures=(
        KnownFailure(
            "split() outputs of an overlapping input: AOTAutograd's regenerated views scatter their gradient "
            "into shared storage (new upstream bug, found by the OpInfo sweep)",
            device="cpu",
            torch="2.13",
        ),
    ),
)
def upstream_new_split_overlapping_input_grad(dtype):
    """x.split(2) of a (4, 4) input with strides (2, 1): the compiled input gradient differs from eager's."""
    return Program(split_in_two, [strided((4, 4), (2, 1), requires_grad=True)])
