"""The three written forms of a repro, as text: the kernel-level `repro.py`, the graph-level case module, the
plain script. Each is rendered from the cut subgraph (`subgraph.Subgraph`) and input descriptions; nothing
here runs them (`extract.py` verifies each before it is kept)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any

import torch

from harness.layout import contiguous_stride, extent
from harness.extraction import inline_emulation

VALUES_FILE = "inputs.pt"


@dataclass(frozen=True)
class InputSpec:
    """One graph input, as the case regenerates it: its exact layout, and how its storage is filled."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    storage_numel: int
    dtype: torch.dtype
    fill: str  # a TensorSpec fill
    low: float = 0
    high: float = 0

    def case_text(self) -> str:
        dtype = f"dtype={_dtype(self.dtype)}"
        fill = (
            f'fill="{self.fill}"'
            + ("" if self.fill == "ones" else f", low={self.low!r}")
            + (f", high={self.high!r}" if self.fill in ("rand", "randint") else "")
        )
        plain = (
            self.stride == tuple(contiguous_stride(self.size))
            and self.storage_offset == 0
            and self.storage_numel == math.prod(self.size)
        )
        if plain:
            return f"contiguous({self.size}, {dtype}, {fill})"
        return (
            f"strided({self.size}, {self.stride}, storage_offset={self.storage_offset}, "
            f"storage_numel={self.storage_numel}, {dtype}, {fill})"
        )

    def plain_text(self) -> str:
        return (
            f"make({self.size}, {self.stride}, {self.storage_offset}, {self.storage_numel}, {_dtype(self.dtype)}, "
            f'"{self.fill}", {self.low!r}, {self.high!r}, generator, device)'
        )


def regenerable(tensor: torch.Tensor) -> InputSpec | None:
    """How to make a tensor like this one from a seed: its layout, and a fill over the range its storage holds
    (`arange` when it is one); None when seeded values cannot stand for it (non-finite, complex)."""
    itemsize = tensor.element_size()
    numel = tensor.untyped_storage().nbytes() // itemsize
    if (
        tensor.is_complex()
        or numel == 0
        or numel < tensor.storage_offset() + extent(tuple(tensor.shape), tuple(tensor.stride()))
    ):
        return None
    whole = torch.empty(0, dtype=tensor.dtype).set_(tensor.untyped_storage().cpu())
    layout = dict(
        size=tuple(tensor.shape),
        stride=tuple(tensor.stride()),
        storage_offset=tensor.storage_offset(),
        storage_numel=numel,
        dtype=tensor.dtype,
    )
    if tensor.dtype == torch.bool:
        return InputSpec(**layout, fill="randint", low=0, high=2)
    if tensor.is_floating_point():
        wide = whole.to(torch.float64)
        if not bool(wide.isfinite().all()):
            return None
        if bool((wide == 1).all()):
            return InputSpec(**layout, fill="ones")
        if bool((wide == torch.arange(numel, dtype=torch.float64) + float(wide[0])).all()):
            return InputSpec(**layout, fill="arange", low=float(wide[0]))
        # Four significant digits: a range to read, not the values (rounded outward, so it still holds them).
        low, high = float(wide.min()), float(wide.max())
        return InputSpec(**layout, fill="rand", low=_outward(low, -1), high=_outward(high, 1))
    wide = whole.to(torch.int64)
    if bool((wide == torch.arange(numel) + int(wide[0])).all()):
        return InputSpec(**layout, fill="arange", low=int(wide[0]))
    return InputSpec(**layout, fill="randint", low=int(wide.min()), high=int(wide.max()) + 1)


def _outward(value: float, direction: int) -> float:
    rounded = float(f"{value:.4g}")
    if (rounded - value) * direction >= 0:
        return rounded
    step = 10 ** (math.floor(math.log10(abs(value))) - 3) if value else 0.0
    return float(f"{rounded + direction * step:.4g}")


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype)  # "torch.float32"


def _header(lines: list[str]) -> str:
    """A module docstring holding these lines as they are (a path's backslash, a quote in a command)."""
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', "'''")
    return '"""' + text + '\n"""'


def case_module(
    name: str,
    subgraph_code: str,
    imports: list[str],
    specs: list[InputSpec] | None,
    dtype: torch.dtype,
    docstring: list[str],
    case_kwargs: dict[str, str],
    parent: dict[str, Any],
) -> str:
    """The graph-level repro: a case module in the registry's format."""
    if specs is None:
        inputs = f"[clone_exact(t) for t in torch.load(Path(__file__).with_name({VALUES_FILE!r}), weights_only=True)]"
        extra = ["from pathlib import Path"]
    else:
        inputs = "[\n" + "".join(f"        {spec.case_text()},\n" for spec in specs) + "    ]"
        extra = []
    kwargs = "".join(f", {key}={value}" for key, value in case_kwargs.items())
    summary = f"The subgraph of {parent['kernel']}, cut out of {parent['case']} ({parent['graph']})."
    return "\n".join(
        [
            _header(docstring),
            "",
            "import torch",
            *extra,
            *imports,
            "",
            "from harness import Program, Tolerance, case, contiguous, strided  # noqa: F401",
            *(["from harness.inputs import clone_exact"] if specs is None else []),
            "",
            f"PARENT = {parent!r}",
            "",
            "",
            subgraph_code,
            "",
            "",
            f'@case(tags=("extracted",), dtypes=({_dtype(dtype)},){kwargs})',
            f"def {name}(dtype):",
            f"    {summary!r}",  # a string literal Python writes: no case name can close it early
            f"    return Program(graph, {inputs})",
            "",
        ]
    )


PLAIN_HELPERS = '''
def make(size, stride, offset, storage_numel, dtype, fill, low, high, generator, device):
    """A tensor with this exact layout over a storage filled from the generator."""
    if fill == "arange":
        storage = (torch.arange(storage_numel, dtype=torch.float64 if dtype.is_floating_point else torch.int64)
                   + low).to(dtype)
    elif fill == "ones":
        storage = torch.ones(storage_numel, dtype=dtype)
    elif dtype == torch.bool:
        storage = torch.randint(0, 2, (storage_numel,), generator=generator).bool()
    elif fill == "randint" or not dtype.is_floating_point:
        storage = torch.randint(int(low), int(high), (storage_numel,), generator=generator).to(dtype)
    else:
        storage = (torch.rand(storage_numel, generator=generator, dtype=torch.float64) * (high - low) + low).to(dtype)
    return storage.to(device).as_strided(size, stride, offset)
'''

MOVE_HELPER = '''
def copy_of(tensor, device):
    """A copy on `device` with the same size, stride, offset and whole storage (`.to()` would make it dense)."""
    whole = torch.empty(0, dtype=tensor.dtype).set_(tensor.untyped_storage().cpu()).to(device, copy=True)
    return whole.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())
'''


def plain_script(
    subgraph_code: str,
    imports: list[str],
    specs: list[InputSpec] | None,
    docstring: list[str],
    compile_kwargs: dict[str, str],
    tolerance: tuple[float, float] | None,
    device: str,
    values_file: str = VALUES_FILE,
    emulation: str | None = None,
) -> str:
    """The upstream tracker's form: eager against torch.compile with assert_close, no harness import. Inputs
    made from `specs`, or loaded from `values_file` beside it; `compile_kwargs` are Python source, written by the
    caller from plain values. With `emulation` (an injection a script can carry,
    `inline_emulation.why_not`), the compiled call runs under it inline, and `--without-emulation` runs it plain."""
    if specs is None:
        make_inputs = (
            "def inputs(device):\n"
            f"    return torch.load(Path(__file__).with_name({values_file!r}), weights_only=True)\n"
        )
        extra = ["from pathlib import Path"]
    else:
        rows = "".join(f"        {spec.plain_text()},\n" for spec in specs)
        make_inputs = (
            "def inputs(device):\n    generator = torch.Generator().manual_seed(0)\n"
            f"    return [\n{rows}    ]\n" + PLAIN_HELPERS
        )
        extra = []
    close = "" if tolerance is None else f", rtol={tolerance[0]!r}, atol={tolerance[1]!r}"
    compiled = f"torch.compile(graph{''.join(f', {k}={v}' for k, v in compile_kwargs.items())})(*compiled_args)"
    if emulation is None:
        signature, call = "main(device)", f"actual = {compiled}"
        run = f"main(sys.argv[1] if len(sys.argv) > 1 else {device!r})"
        emulated: list[str] = []
    else:
        signature = "main(device, emulated=True)"
        call = f"with emulated_launches() if emulated else contextlib.nullcontext():\n            actual = {compiled}"
        run = (
            "main(next((a for a in sys.argv[1:] if not a.startswith('--')), "
            f"{device!r}), emulated='--without-emulation' not in sys.argv)"
        )
        emulated = ["", inline_emulation.text(emulation)]
    body = textwrap.dedent(f'''
    def {signature}:
        if device.startswith("npu"):
            import torch_npu  # noqa: F401  (registers the device and its compiler backend)
        made = inputs(device)
        eager_args = [copy_of(t, device) for t in made]
        compiled_args = [copy_of(t, device) for t in made]
        expected = graph(*eager_args)
        {call}
        # Outputs, and the inputs after the call (a graph may write them in place).
        torch.testing.assert_close((actual, compiled_args), (expected, eager_args), equal_nan=True{close})
        print("compiled matches eager: the bug does not reproduce here")


    if __name__ == "__main__":
        {run}
    ''')
    stdlib, from_torch = (
        (inline_emulation.STDLIB_IMPORTS, inline_emulation.TORCH_IMPORTS) if emulation is not None else ([], [])
    )
    return "\n".join(
        [
            _header(docstring),
            "",
            *sorted(["import sys", *stdlib]),
            *extra,
            "",
            "import torch",
            *from_torch,
            *imports,
            "",
            "",
            subgraph_code,
            "",
            "",
            make_inputs,
            MOVE_HELPER,
            *emulated,
            body,
        ]
    )


def kernel_repro(subgraph_code: str, imports: list[str], docstring: list[str]) -> str:
    """The kernel-level repro: the kernel's subgraph, run eagerly and against the generated kernel."""
    return "\n".join(
        [
            _header(docstring),
            "",
            "import sys",
            "from pathlib import Path",
            "",
            "import torch  # noqa: F401",
            *imports,
            "",
            "",
            subgraph_code,
            "",
            "",
            'if __name__ == "__main__":',
            "    from harness.extraction.kernel_repro import main",
            "",
            "    sys.exit(main(Path(__file__).parent, graph))",
            "",
        ]
    )
