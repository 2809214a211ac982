"""Programs whose wrappers call ATen fallbacks and custom ops (`torch.ops.*`), for the fallback probe's tests.

`fallback_custom_op_wrong_layout` is wrong by design: its custom op assumes a contiguous input and is tagged
`flexible_layout`, so eager hands it a contiguous tensor and Inductor a transposed buffer. The others are correct
programs; `fallback_view_write` and `fallback_view_read` fail only under the `glue-offset-dropped` emulation.
"""

import torch

from harness import Program, case, contiguous

NAMESPACE = "harness_fallback_test"


def _defined(name: str) -> bool:
    """Whether this process registered the op already (the module may be imported more than once)."""
    try:
        getattr(getattr(torch.ops, NAMESPACE), name).default
    except (AttributeError, RuntimeError):
        return False
    return True


if not _defined("double_it"):

    @torch.library.custom_op(f"{NAMESPACE}::double_it", mutates_args=(), tags=(torch.Tag.flexible_layout,))
    def double_it(x: torch.Tensor) -> torch.Tensor:
        out = x * 2
        if not x.is_contiguous():  # the op's bug: its non-contiguous path adds 1
            out = out + 1
        return out

    double_it.register_fake(lambda x: torch.empty_like(x))

if not _defined("bump_"):

    @torch.library.custom_op(f"{NAMESPACE}::bump_", mutates_args=("x",))
    def bump_(x: torch.Tensor) -> None:
        x.add_(1)

    bump_.register_fake(lambda x: None)

if not _defined("fill_rows_"):

    @torch.library.custom_op(f"{NAMESPACE}::fill_rows_", mutates_args=("out",))
    def fill_rows_(out: torch.Tensor, src: torch.Tensor) -> None:
        out.copy_(src * 3)

    fill_rows_.register_fake(lambda out, src: None)

if not _defined("row_sums"):

    @torch.library.custom_op(f"{NAMESPACE}::row_sums", mutates_args=())
    def row_sums(x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)

    row_sums.register_fake(lambda x: x.new_empty(x.shape[:-1]))

# Ops that break their own contract (the custom-op contract check): a write declared not to happen, an output that
# is a view of an input declared fresh (defined through a Library: `custom_op` refuses it at run time), a fake kernel
# whose output has another layout than the real one.
if not _defined("scale_in_place_undeclared"):

    @torch.library.custom_op(f"{NAMESPACE}::scale_in_place_undeclared", mutates_args=())
    def scale_in_place_undeclared(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)  # the op's bug: its schema says x is not written
        return x * 1

    scale_in_place_undeclared.register_fake(lambda x: torch.empty_like(x))

if not _defined("flat_view_undeclared"):
    _ALIASING = torch.library.Library(NAMESPACE, "FRAGMENT")
    _ALIASING.define("flat_view_undeclared(Tensor x) -> Tensor")  # the op's bug: no (a) alias annotation
    _ALIASING.impl("flat_view_undeclared", lambda x: x.view(-1), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::flat_view_undeclared", lambda x: x.new_empty(x.numel()), lib=_ALIASING)

if not _defined("transpose_fake_untransposed"):

    @torch.library.custom_op(f"{NAMESPACE}::transpose_fake_untransposed", mutates_args=())
    def transpose_fake_untransposed(x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()

    # The op's bug: its fake kernel keeps the input's shape.
    transpose_fake_untransposed.register_fake(lambda x: torch.empty_like(x))

OPS = getattr(torch.ops, NAMESPACE)


def sort_cumsum(x):
    y = torch.sort(x * 2, dim=-1).values  # aten.sort and aten.cumsum are ATen fallbacks on CPU and CUDA
    return y.cumsum(0) + 1


@case(tags=("fallback",), dtypes=(torch.float32,), modes=("inference", "training"))
def fallback_sort_cumsum(dtype):
    """Two ATen fallbacks between generated kernels."""
    return Program(sort_cumsum, [contiguous((16, 8), requires_grad=True)])


def custom_op_wrong_layout(x):
    return OPS.double_it(x.t().contiguous()).cos().sum(0)


@case(tags=("fallback",), dtypes=(torch.float32,), modes=("inference",))
def fallback_custom_op_wrong_layout(dtype):
    """A custom op wrong on the layout Inductor hands it (transposed) and right on eager's (contiguous)."""
    return Program(custom_op_wrong_layout, [contiguous((16, 8))])


def mutating_custom_op(x):
    w = x.cos()
    OPS.bump_(w)
    return w * 3, torch.sort(w, dim=-1).values


@case(tags=("fallback",), dtypes=(torch.float32,), modes=("inference", "training"))
def fallback_mutating_custom_op(dtype):
    """A custom op updating a buffer in place, then an ATen fallback reading it."""
    return Program(mutating_custom_op, [contiguous((16, 8), requires_grad=True)])


def view_write(x, y):
    OPS.fill_rows_(x[2:6], y)  # the op writes a view of the input at storage offset 2 rows
    return x.cos()


@case(tags=("fallback",), dtypes=(torch.float32,), modes=("inference",), dynamic_dims={0: (1,), 1: (1,)})
def fallback_view_write(dtype):
    """A custom op writing a slice of a graph input (a mutable view of a larger buffer)."""
    return Program(view_write, [contiguous((8, 16)), contiguous((4, 16))])


def view_of_mutated(x, y):
    w = x.cos()
    OPS.fill_rows_(w[2:6], y)  # a view of a buffer the graph made, mutated by the op
    return w * 2


@case(tags=("fallback",), dtypes=(torch.float32,), modes=("inference",), dynamic_dims={0: (1,), 1: (1,)})
def fallback_view_of_mutated_buffer(dtype):
    """A custom op writing a slice of an intermediate buffer: under dynamic shapes the wrapper builds the view with
    a symbolic storage offset."""
    return Program(view_of_mutated, [contiguous((8, 16)), contiguous((4, 16))])


def view_read(x):
    return OPS.row_sums(x[2:6]) + 1  # the op reads a view of the input at storage offset 2 rows


@case(tags=("fallback",), dtypes=(torch.float32,), modes=("inference",))
def fallback_view_read(dtype):
    """A custom op reading a slice of a graph input (a view at a storage offset)."""
    return Program(view_read, [contiguous((8, 16))])


def undeclared_mutation(x):
    y = x + 1
    z = OPS.scale_in_place_undeclared(y)  # doubles y too, which Inductor does not know
    return y * 3 + z


@case(tags=("fallback", "contract"), dtypes=(torch.float32,), modes=("inference",))
def contract_undeclared_mutation(dtype):
    """A custom op declared mutates_args=() that writes its input."""
    return Program(undeclared_mutation, [contiguous((8, 16))])


def undeclared_alias(x):
    y = x * 2
    flat = OPS.flat_view_undeclared(y)  # a view of y, declared as a fresh tensor
    y.add_(1)
    return flat * 3


@case(tags=("fallback", "contract"), dtypes=(torch.float32,), modes=("inference",))
def contract_output_aliases_input(dtype):
    """A custom op whose output is a view of its input, its schema saying nothing of it."""
    return Program(undeclared_alias, [contiguous((8, 16))])


def wrong_fake_layout(x):
    return OPS.transpose_fake_untransposed(x * 2).sum(0)


@case(tags=("fallback", "contract"), dtypes=(torch.float32,), modes=("inference",))
def contract_fake_kernel_wrong_layout(dtype):
    """A custom op whose fake kernel gives the input's shape, where the real one transposes."""
    return Program(wrong_fake_layout, [contiguous((8, 16))])


def solve_then_scale(a, b):
    system = a + 4 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)  # well conditioned
    return torch.linalg.solve(system, b * 2).sum(dim=-1)


@case(tags=("fallback",), dtypes=(torch.float32,), modes=("inference", "training"))
def fallback_linalg_solve(dtype):
    """A linear solve: an ATen fallback on every device (no Inductor lowering), between generated kernels."""
    return Program(solve_then_scale, [contiguous((8, 8), requires_grad=True), contiguous((8, 4), requires_grad=True)])
