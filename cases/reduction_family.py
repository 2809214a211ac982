"""The reduction family seed 002 says shares its root cause, for the rewritten-kernel emulations.

Seed 002's NPU codegen broke reductions over several flattened axes in two
ways, emulated on CPU and CUDA by `--inject reduction-partial` and
`--inject reduction-axis-order` (`harness/inject/rewritten.py`). Each case
here is one point of the space those bugs depend on, so that each emulation
can be shown to hit and to miss where it should:

- axes: the program reduces over 1, 2 or 3 axes;
- layout: `contiguous` (one operand, laid out so that Inductor merges the
  reduced axes into one flattened loop) or `permuted` (the seed's pattern:
  a contiguous operand times a permuted one, so the axes stay separate and
  the kernel decomposes a flattened index into them; with one axis, the
  operand is transposed and the reduction runs across its rows);
- size: the reduced extent below, at or above one loop chunk.

A loop chunk is what one iteration of the reduction loop covers. On CPU it
is one `at::vec` vector of float32 (16 elements with AVX-512, 8 with AVX2:
the sizes below follow the machine's width); on Triton one `R0_BLOCK`, as
the autotuner picks it. `below` and `at` fit one chunk on both (one masked
or full vector on CPU, a persistent `triton_per_*` kernel on Triton), and
`above` loops on both: 4100 elements exceed every `R0_BLOCK` Inductor's
reduction configs use (at most 2048) and need 257 vectors on CPU.

Expected: `reduction-partial` fails every `above` case and passes `below`
and `at` (no loop runs twice: nothing is lost); `reduction-axis-order` fails
the `permuted` cases with two or three axes and passes the others (their
kernels have no decomposed multi-axis index).
"""

import torch

from harness import Case, Program, contiguous, permuted

ISSUE = (
    "torch_npu Inductor (NPU Triton codegen) report: multi-axis reduction scoped wrong after flatten "
    "(RMSNorm weight gradient, sum over dims (0, 1, 2) of a permuted bf16 x fp32 product)"
)
ROWS = 8  # outputs: one reduction per row
# Small integers: every sum (and product) is exact in float32 whatever the order, so a correct
# kernel matches eager to the bit and a failure is never a reordered sum.
VALUES = {"fill": "randint", "low": -4, "high": 5}
ABOVE = {1: (4100,), 2: (41, 100), 3: (5, 41, 20)}  # 4100 elements; axes of unequal sizes


def chunk_elements() -> int:
    """float32 elements in one CPU reduction chunk on this machine (its `at::vec` width)."""
    from harness.inductor_compat.kernel_variants import cpu_chunk_elements

    return cpu_chunk_elements(torch.float32)


def axis_sizes(axes: int, size: str) -> tuple[int, ...]:
    if size == "above":
        return ABOVE[axes]
    chunk = chunk_elements()
    total = chunk if size == "at" else chunk * 3 // 4  # more than 8 elements when chunks are 16 wide:
    # Inductor unrolls reductions of 8 elements or fewer (config.unroll_reductions_threshold), loop or not.
    sizes = [2] * (axes - 1)
    return (*sizes, max(1, total // 2 ** (axes - 1)))


def sum_last(axes: int):
    def program(x):
        return x.sum(dim=tuple(range(-axes, 0)))

    return program


def product_sum_last(axes: int):
    def program(a, b):
        return (a * b).sum(dim=tuple(range(-axes, 0)))

    return program


def _build(axes: int, layout: str, size: str):
    def build(dtype):
        sizes = axis_sizes(axes, size)
        if layout == "contiguous":
            return Program(sum_last(axes), [contiguous((ROWS, *sizes), **VALUES)])
        if axes == 1:  # the reduced axis is the operand's outer one: a reduction across rows
            return Program(sum_last(1), [permuted((sizes[0], ROWS), (1, 0), **VALUES)])
        # b is stored with its first two reduced axes swapped (as the seed's permute(0, 2, 1, 3)):
        # no two reduced axes are adjacent in both operands, so none can be merged.
        stored = (ROWS, sizes[1], sizes[0], *sizes[2:])
        return Program(
            product_sum_last(axes),
            [contiguous((ROWS, *sizes), **VALUES), permuted(stored, (0, 2, 1, *range(3, axes + 1)), **VALUES)],
        )

    return build


FAMILY = [
    (1, "contiguous", "below"),
    (1, "contiguous", "at"),
    (1, "contiguous", "above"),
    (1, "permuted", "above"),
    (2, "contiguous", "below"),
    (2, "contiguous", "above"),
    (2, "permuted", "above"),
    (3, "contiguous", "at"),
    (3, "permuted", "above"),
]

CASES = [
    Case(
        name=f"reduction_axes{axes}_{layout}_{size}",
        build=_build(axes, layout, size),
        tags=(
            "reduction",
            "emulation-target",
            f"axes{axes}",
            layout,
            f"{size}-chunk",
            *(("quick",) if (axes, layout, size) == (2, "permuted", "above") else ()),
        ),  # the quick run's sample
        dtypes=(torch.float32,),
        issue=ISSUE,
        description=f"A sum over {axes} axis{'es' if axes > 1 else ''} ({layout} layout), "
        f"{size} one loop chunk{' (4100 elements)' if size == 'above' else ''}.",
    )
    for axes, layout, size in FAMILY
]
