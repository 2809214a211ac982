"""pytorch#198131: [inductor] `dst[:] = src[:]; src.add_(1)` copies the *updated* src into dst.

https://github.com/pytorch/pytorch/issues/198131 (open)

`remove_noop_ops` replaces `aten.copy(dst, alias(src))` by `src` itself; the
functionalized graph then writes back `copy_(src, add)` before `copy_(dst, src)`
and dst receives the post-mutation values. Eager and aot_eager are right. FX
post-grad pass, device independent (issue repro on CUDA, CPU 2.13.0 fails).
"""

import torch

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/198131"


def copy_then_mutate_source(dst, src):
    dst[0:, :] = src[0:, :]
    src.add_(1)
    return src


@case(
    tags=("upstream", "inductor", "inplace", "aliasing", "fx-pass", "quick"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="pass:remove_noop_ops",
    known_failures=(
        KnownFailure(
            "remove_noop_ops turns the copy of src into src, copied after src.add_(1) (pytorch#198131)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "remove_noop_ops copy of a later-mutated input (pytorch#198131, CUDA repro)", device="cuda", torch=">=2.11"
        ),
    ),
)
def upstream_198131_copy_of_input_mutated_later(dtype):
    """dst[:] = src[:] then src.add_(1): dst (an input mutation) receives src + 1."""
    return Program(copy_then_mutate_source, [contiguous((3, 4), fill="ones"), contiguous((3, 4), fill="arange")])
