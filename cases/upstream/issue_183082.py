"""pytorch#183082: Inductor CPU returns wrong argmax after sin_() and transpose (fixed before 2.13.0).

https://github.com/pytorch/pytorch/issues/183082 (closed; same bug as #183894, #163929 and the
regression report #174073)

`x.clone(); x.sin_(); x.t().argmax()` returned 13 instead of 31 on CPU: the
argmax over the transposed view of the in-place-updated buffer was indexed in
the wrong order. Reported on 2.10.0+cpu (and #163929 on a 2.10 nightly, #183894
on 2.13.0.dev20260518); fixed by commit 6269e7fa (2026-05-20), so torch 2.13.0
passes here. CUDA was never affected (#183894: cuda eager == cuda compiled).
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/183082"
X = [
    [-1.5256, -0.7502, -0.6540, -1.6095, -0.1002, -0.6092, -0.9798],
    [-1.6091, -0.7121, 0.3037, -0.7773, -0.2515, -0.2223, 1.6871],
    [0.2284, 0.4676, -0.6970, -1.1608, 0.6995, 0.1991, 0.8657],
    [0.2444, -0.6629, 0.8073, 1.1017, -0.1759, -2.2456, -1.4465],
    [0.0612, -0.6177, -0.7981, -0.1316, -0.7984, 0.3357, 0.2753],
]


def argmax_after_sin_transpose(x):
    x = x.clone()
    x.sin_()
    return x.t().argmax()


@case(
    tags=("upstream", "inductor", "reduction", "argmax", "inplace", "layout", "fixed"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.argmax",
    known_failures=(
        KnownFailure(
            "argmax of a transposed, sin_-mutated buffer indexed in the wrong order (pytorch#183082)",
            device="cpu",
            torch=">=2.10,<2.13",
        ),
    ),
)
def upstream_183082_argmax_after_sin_inplace_transpose(dtype):
    """argmax() of x.clone().sin_().t(): 13 instead of 31 before the fix (passes on 2.13.0)."""
    return Program(argmax_after_sin_transpose, [torch.tensor(X, dtype=dtype)])
