"""Correct programs: reused buffers and in-place chains.

A clone updated in place several times, one temporary overwritten again and
again, `out=` into a fresh buffer, an in-place add into an `as_strided` view of
a clone, and `copy_` into slices of a fresh buffer. Inductor turns these
mutations into functional graphs and may reuse or reinplace buffers; the values
must stay eager's.
"""

import torch

from harness import KnownFailure, Program, case, contiguous, gapped, permuted

FLOATS = (torch.bfloat16, torch.float16, torch.float32)


def clone_inplace_chain(x):
    y = x.clone()
    y.mul_(2)
    y.add_(1)
    y.sub_(x.mean(dim=-1, keepdim=True))
    y.div_(3)
    return y, y.sum(dim=-1)


@case(tags=("correct", "buffers", "inplace", "chain"), dtypes=FLOATS, modes=("inference", "training"))
def correct_clone_inplace_chain(dtype):
    """y = x.clone(); y.mul_(2); y.add_(1); y.sub_(row mean); y.div_(3); then its row sums."""
    return Program(clone_inplace_chain, [contiguous((64, 1024), requires_grad=True)])


def temporary_overwritten(x):
    tmp = torch.empty_like(x)
    tmp.copy_(x * 2)
    first = tmp.sum(dim=-1)
    tmp.copy_(x.sin())
    second = tmp.sum(dim=0)
    tmp.fill_(0.25)
    tmp.add_(x.t().contiguous().t())
    third = tmp.mean(dim=0)
    tmp.mul_(1.5)
    tmp.sub_(x)
    return first, second, third, tmp


@case(tags=("correct", "buffers", "inplace", "reuse"), dtypes=FLOATS, modes=("inference", "training"))
def correct_temporary_overwritten(dtype):
    """One empty_like temporary overwritten four times (copy_, copy_, fill_+add_, mul_+sub_), reduced in between.

    (No amax of `sin` here: CPU Inductor's bf16/fp16 amax backward over a recomputed input gives NaN,
    pytorch/pytorch#186799; that is a bug, not a correct program.)
    """
    return Program(temporary_overwritten, [contiguous((96, 640), requires_grad=True)])


def add_out_fresh(a, b):
    buffer = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    torch.add(a, b, alpha=2, out=buffer)
    product = torch.empty_like(buffer)
    torch.mul(buffer, a, out=product)
    return product.sum(dim=0), buffer


@case(tags=("correct", "buffers", "out"), dtypes=FLOATS + (torch.int64,), modes=("inference",))
def correct_add_out_fresh(dtype):
    """torch.add(a, b, out=fresh) and torch.mul(.., out=fresh_like), then a column sum."""
    return Program(
        add_out_fresh,
        [
            contiguous((512, 256), fill="randint", low=-50, high=50),
            permuted((256, 512), (1, 0), fill="randint", low=-50, high=50),
        ],
    )


AS_STRIDED_UPDATE_DROPPED = KnownFailure(
    "torch_npu's triton_experimental makes aten.as_strided a fallback: the update through it is dropped "
    "(docs/found/torch_npu_as_strided_update_dropped.md)",
    npu_backend="triton_experimental",
    torch_npu=">=2.13.0,<=2.14.0",
)


def as_strided_view_add(x, update):
    y = x.clone()
    # 32 rows of 48 elements, rows 64 apart, starting at element 5: a window into y's storage.
    window = y.as_strided((32, 48), (64, 1), 5)
    window.add_(update)
    return y, y.view(32, 64).sum(dim=-1)


@case(
    tags=("correct", "buffers", "inplace", "as_strided"),
    dtypes=FLOATS + (torch.int64,),
    modes=("inference",),
    # torch_npu's own backend drops the update (found_torch_npu_as_strided_update_dropped, cases/found_torch_npu.py).
    known_failures=(AS_STRIDED_UPDATE_DROPPED,),
)
def correct_as_strided_view_add(dtype):
    """add_ into an as_strided window of a clone (2048 elements, 1536 updated), then row sums."""
    return Program(
        as_strided_view_add,
        [
            contiguous((2048,), fill="randint", low=-100, high=100),
            contiguous((32, 48), fill="randint", low=-100, high=100),
        ],
    )


def as_strided_view_add_grad(x, update):
    y = x.clone()
    y.as_strided((32, 48), (64, 1), 5).add_(update * 2)
    return torch.softmax(y.view(32, 64), dim=-1)


@case(
    tags=("correct", "buffers", "inplace", "as_strided"),
    dtypes=(torch.bfloat16, torch.float32),
    modes=("training",),
    # --bisect: "Inductor dropped an in-place update": the forward's and the backward's, each through as_strided.
    known_failures=(AS_STRIDED_UPDATE_DROPPED,),
)
def correct_as_strided_view_add_training(dtype):
    """add_ into an as_strided view of a clone, then softmax: gradients through as_strided_scatter."""
    return Program(
        as_strided_view_add_grad,
        [
            contiguous((2048,), requires_grad=True),
            contiguous((32, 48), requires_grad=True),
        ],
    )


def copy_into_slices(a, b, c):
    buffer = torch.zeros(64, 320, dtype=a.dtype, device=a.device)
    buffer[:, :128].copy_(a)
    buffer[:, 128:256].copy_(b.t())
    buffer[::2, 256:].copy_(c)
    buffer[1::2, 256:] = c * -1
    return buffer, buffer.sum(dim=1)


@case(tags=("correct", "buffers", "copy", "slice"), dtypes=FLOATS, modes=("inference", "training"))
def correct_copy_into_slices(dtype):
    """copy_ into column slices (one from a transpose, one with a row step) of a fresh zeros buffer."""
    return Program(
        copy_into_slices,
        [
            contiguous((64, 128), requires_grad=True),
            contiguous((128, 64), requires_grad=True),
            gapped((32, 64), step=2, dim=0, requires_grad=True),
        ],
    )
