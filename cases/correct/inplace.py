"""Correct programs: in-place indexed writes into fresh buffers and into graph inputs.

`index_put_`, `index_add_`, `scatter_`, `scatter_add_`, `x[idx] += v` and
`masked_fill_`, each writing either a buffer the function makes itself
(`torch.zeros(...)`) or one of its inputs (a graph input mutation, compared as
`mutated_in<k>`). Where the op is not an accumulation the indices are unique
(an affine map coprime with the length), so the result is deterministic;
accumulations (`accumulate=True`, `index_add_`, `scatter_add_`) take random
indices with repeats.
"""

import torch

from harness import Program, case, contiguous


FLOATS = (torch.bfloat16, torch.float32)
FLOATS_AND_INT = (torch.bfloat16, torch.float32, torch.int64)


def unique_positions(count, length, device, multiplier=37, shift=11):
    """`count` distinct positions in [0, length): multiplier is odd and length a power of two."""
    return (torch.arange(count, device=device) * multiplier + shift) % length


def index_put_fresh(values):
    flat = values.flatten()
    index = unique_positions(flat.numel(), 4096, values.device)
    buffer = torch.zeros(4096, dtype=values.dtype, device=values.device)
    buffer.index_put_((index,), flat)
    return buffer, buffer.view(64, 64).sum(-1)


@case(tags=("correct", "inplace", "index_put", "fresh-buffer", "quick"), dtypes=FLOATS, modes=("inference", "training"))
def correct_index_put_fresh(dtype):
    """index_put_ of 2048 values at unique positions into a fresh zeros(4096), then a row sum."""
    return Program(index_put_fresh, [contiguous((32, 64), requires_grad=True)])


@case(
    tags=("correct", "inplace", "index_put", "fresh-buffer", "integer"),
    dtypes=(torch.int64, torch.int32),
    modes=("inference",),
)
def correct_index_put_fresh_int(dtype):
    """index_put_ of integers at unique positions into a fresh buffer (must match exactly)."""
    return Program(index_put_fresh, [contiguous((32, 64), fill="randint", low=-1000, high=1000)])


def index_put_2d_fresh(values, rows):
    # A permutation of the 64 rows (given as arange, scrambled here) times unique columns per row.
    perm = (rows * 13 + 5) % 64
    cols = unique_positions(values.shape[1], 256, values.device, multiplier=9, shift=3)
    buffer = values.new_zeros(64, 256)
    buffer.index_put_((perm[:, None], cols[None, :]), values)
    return torch.softmax(buffer.float(), dim=-1).to(values.dtype)


@case(tags=("correct", "inplace", "index_put", "fresh-buffer"), dtypes=FLOATS, modes=("inference", "training"))
def correct_index_put_2d_fresh(dtype):
    """2-d advanced-index index_put_ (broadcast row and column indices) into a fresh buffer, then softmax."""
    return Program(
        index_put_2d_fresh,
        [
            contiguous((64, 160), requires_grad=True),
            contiguous((64,), dtype=torch.int64, fill="arange"),
        ],
    )


def index_put_accumulate_fresh(values, index):
    buffer = torch.zeros(512, dtype=values.dtype, device=values.device)
    buffer.index_put_((index,), values, accumulate=True)
    return buffer


@case(
    tags=("correct", "inplace", "index_put", "accumulate", "fresh-buffer"),
    dtypes=(torch.float32, torch.int64),
    modes=("inference",),
)
def correct_index_put_accumulate_fresh(dtype):
    """index_put_(accumulate=True) of 4096 values at random (repeated) positions into a fresh zeros(512)."""
    return Program(
        index_put_accumulate_fresh,
        [
            contiguous((4096,), fill="randint", low=-100, high=100),
            contiguous((4096,), dtype=torch.int64, fill="randint", low=0, high=512),
        ],
    )


def index_put_into_input(buffer, values):
    index = unique_positions(values.numel(), buffer.numel(), buffer.device, multiplier=7, shift=1)
    buffer.index_put_((index,), values)
    return buffer.sum()


@case(tags=("correct", "inplace", "index_put", "input-mutation"), dtypes=FLOATS_AND_INT, modes=("inference",))
def correct_index_put_input(dtype):
    """index_put_ at unique positions into a graph input (4096 elements, 1024 written), then its sum."""
    return Program(
        index_put_into_input,
        [
            contiguous((4096,), fill="randint", low=-50, high=50),
            contiguous((1024,), fill="randint", low=-50, high=50),
        ],
    )


def index_add_fresh(source, index):
    buffer = torch.zeros(256, source.shape[1], dtype=source.dtype, device=source.device)
    buffer.index_add_(0, index, source)
    return buffer, buffer.amax(dim=0)


@case(
    tags=("correct", "inplace", "index_add", "fresh-buffer"), dtypes=(torch.float32, torch.int64), modes=("inference",)
)
def correct_index_add_fresh(dtype):
    """index_add_ of 1024 rows at random (repeated) row indices into a fresh zeros(256, 64)."""
    return Program(
        index_add_fresh,
        [
            contiguous((1024, 64), fill="randint", low=-20, high=20),
            contiguous((1024,), dtype=torch.int64, fill="randint", low=0, high=256),
        ],
    )


@case(tags=("correct", "inplace", "index_add", "fresh-buffer"), dtypes=(torch.float32,), modes=("training",))
def correct_index_add_fresh_training(dtype):
    """index_add_ into a fresh buffer with a source that requires grad (the gradient is a gather)."""
    return Program(
        index_add_fresh,
        [
            contiguous((1024, 64), requires_grad=True),
            contiguous((1024,), dtype=torch.int64, fill="randint", low=0, high=256),
        ],
    )


def index_add_into_input(buffer, source, index):
    buffer.index_add_(1, index, source, alpha=2)
    return buffer.mean(dim=1, dtype=torch.float32) if buffer.is_floating_point() else buffer.sum(dim=1)


@case(
    tags=("correct", "inplace", "index_add", "input-mutation"),
    dtypes=(torch.float32, torch.int64),
    modes=("inference",),
)
def correct_index_add_input(dtype):
    """index_add_(dim=1, alpha=2) into a graph input with repeated indices, then a row reduction."""
    return Program(
        index_add_into_input,
        [
            contiguous((32, 512), fill="randint", low=-20, high=20),
            contiguous((32, 2048), fill="randint", low=-20, high=20),
            contiguous((2048,), dtype=torch.int64, fill="randint", low=0, high=512),
        ],
    )


def scatter_fresh(source):
    rows, width = source.shape[0], 512
    # Row r writes columns (7 * j + 3 * r) mod 512: unique within each row.
    index = (
        torch.arange(source.shape[1], device=source.device)[None, :] * 7
        + torch.arange(rows, device=source.device)[:, None] * 3
    ) % width
    buffer = torch.zeros(rows, width, dtype=source.dtype, device=source.device)
    buffer.scatter_(1, index, source)
    return buffer, buffer.cumsum(dim=1)


@case(tags=("correct", "inplace", "scatter", "fresh-buffer"), dtypes=FLOATS_AND_INT, modes=("inference",))
def correct_scatter_fresh(dtype):
    """scatter_ (unique column per row) into a fresh zeros(32, 512), then a cumsum along the row."""
    return Program(scatter_fresh, [contiguous((32, 256), fill="randint", low=-8, high=8)])


@case(tags=("correct", "inplace", "scatter", "fresh-buffer"), dtypes=FLOATS, modes=("training",))
def correct_scatter_fresh_training(dtype):
    """scatter_ into a fresh buffer with a source that requires grad, then cumsum, forward and backward."""
    return Program(scatter_fresh, [contiguous((32, 256), requires_grad=True)])


def scatter_add_into_input(buffer, source, index):
    buffer.scatter_add_(0, index, source)
    return buffer * 2


@case(
    tags=("correct", "inplace", "scatter_add", "input-mutation"),
    dtypes=(torch.float32, torch.int64),
    modes=("inference",),
)
def correct_scatter_add_input(dtype):
    """scatter_add_ along dim 0 into a graph input, with random (repeated) indices."""
    return Program(
        scatter_add_into_input,
        [
            contiguous((64, 128), fill="randint", low=-20, high=20),
            contiguous((1024, 128), fill="randint", low=-20, high=20),
            contiguous((1024, 128), dtype=torch.int64, fill="randint", low=0, high=64),
        ],
    )


def scatter_add_fresh_then_input(target, source, index):
    fresh = torch.zeros_like(target)
    fresh.scatter_add_(1, index, source)
    columns = (torch.arange(64, device=target.device) * 3).expand(target.shape[0], 64)  # unique per row
    target.scatter_(1, columns, source[:, :64])
    return fresh.sum(dim=1), target


@case(
    tags=("correct", "inplace", "scatter", "scatter_add", "fresh-buffer", "input-mutation"),
    dtypes=(torch.float32, torch.bfloat16),
    modes=("inference",),
)
def correct_scatter_add_fresh_and_input(dtype):
    """scatter_add_ into a fresh zeros_like and scatter_ (unique columns) into the graph input it mirrors."""
    return Program(
        scatter_add_fresh_then_input,
        [
            contiguous((48, 256)),
            contiguous((48, 1024), fill="randint", low=-4, high=4),
            contiguous((48, 1024), dtype=torch.int64, fill="randint", low=0, high=256),
        ],
    )


def getitem_iadd_input(x, values):
    index = unique_positions(values.shape[0], x.shape[0], x.device, multiplier=5, shift=2)
    x[index] += values
    return x.sum(dim=0)


@case(tags=("correct", "inplace", "index_put", "iadd", "input-mutation"), dtypes=FLOATS_AND_INT, modes=("inference",))
def correct_getitem_iadd_input(dtype):
    """`x[idx] += v` on a graph input with unique row indices (gather, add, index_put)."""
    return Program(
        getitem_iadd_input,
        [
            contiguous((512, 64), fill="randint", low=-30, high=30),
            contiguous((200, 64), fill="randint", low=-30, high=30),
        ],
    )


def getitem_iadd_fresh(values, scale):
    buffer = torch.ones(1024, values.shape[1], dtype=values.dtype, device=values.device) * scale
    index = unique_positions(values.shape[0], 1024, values.device, multiplier=3, shift=7)
    buffer[index] += values
    buffer[index[:100]] *= 2
    return buffer.logsumexp(dim=0)


@case(tags=("correct", "inplace", "index_put", "iadd", "fresh-buffer"), dtypes=FLOATS, modes=("inference", "training"))
def correct_getitem_iadd_fresh(dtype):
    """`buf[idx] += v` then `buf[idx[:100]] *= 2` on a fresh buffer, then logsumexp over 1024 rows."""
    return Program(
        getitem_iadd_fresh,
        [
            contiguous((600, 32), requires_grad=True),
            contiguous((32,), requires_grad=True),
        ],
    )


def masked_fill_both(x, mask):
    y = x.clone()
    y.masked_fill_(y > 0.5, 0.5)
    x.masked_fill_(mask, -1)
    return y.sum(dim=-1), x


@case(
    tags=("correct", "inplace", "masked_fill", "fresh-buffer", "input-mutation"),
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    modes=("inference",),
)
def correct_masked_fill_inplace(dtype):
    """masked_fill_ on a clone (clamp above 0.5) and on the graph input itself (with a bool mask input)."""
    return Program(
        masked_fill_both,
        [
            contiguous((64, 1024)),
            contiguous((64, 1024), dtype=torch.bool),
        ],
    )


def masked_fill_clone_training(x):
    y = x * 3
    y.masked_fill_(x.abs() > 1.5, 0.0)
    return torch.softmax(y, dim=-1)


@case(tags=("correct", "inplace", "masked_fill"), dtypes=(torch.bfloat16, torch.float32), modes=("training",))
def correct_masked_fill_training(dtype):
    """masked_fill_ on an intermediate, then softmax, forward and backward."""
    return Program(masked_fill_clone_training, [contiguous((64, 768), requires_grad=True)])
