"""What a kernel-level `repro.py` runs: the generated kernel on its saved launch, the subgraph eagerly.

The directory holds the compiled module the kernel was generated into
(`_compiled_module.py`, Inductor's own output code: loading it compiles its
kernels, from Inductor's caches when warm), the launch (`launch.pt`) and
`extraction.json`. The kernel is launched once on the saved arguments,
through the run's injection when it had one (so an emulated fault stays in
place), and each argument it writes is judged against the subgraph's eager
value by the harness's verdict rules.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from harness.layout import dtype_name, dtype_named

LAUNCH_FILE = "launch.pt"
MODULE_FILE = "_compiled_module.py"
MANIFEST = "extraction.json"


@dataclass
class KernelCheck:
    diverged: bool
    lines: list[str] = field(default_factory=list)
    error: str | None = None


def main(directory: str | Path, graph: Callable[..., Any]) -> int:
    """`python repro.py [--without-injection] [--device D]`: exit 1 when the kernel diverges, 0 when it
    matches, 2 when it cannot run."""
    manifest = json.loads((Path(directory) / MANIFEST).read_text())
    parser = argparse.ArgumentParser(description=f"kernel-level repro of {manifest['kernel']['name']}")
    parser.add_argument("--device", default=manifest["device"])
    parser.add_argument(
        "--without-injection",
        action="store_true",
        help="launch the kernel as generated, without the run's injected fault or emulation",
    )
    options = parser.parse_args()
    from harness.devices import get_device

    try:
        device = get_device(options.device.split(":")[0])
    except (KeyError, ValueError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    unavailable = device.unavailable_reason()
    if unavailable:
        print(f"error: device {options.device} is not usable: {unavailable}", file=sys.stderr)
        return 2
    if device.surrogate():
        print(f"({device.surrogate()})")
    inject = None if options.without_injection else manifest.get("kernel_injection")
    if inject:
        print(f"(emulation/injected fault, not a result of real hardware: {inject})")
    found = check(directory, graph, options.device, inject)
    for line in found.lines:
        print(line)
    if found.error:
        print(f"error: {found.error}", file=sys.stderr)
        return 2
    return 1 if found.diverged else 0


def check(directory: str | Path, graph: Callable[..., Any], device: str, inject: str | None) -> KernelCheck:
    """Launch the kernel on its saved arguments and judge what it writes against the subgraph, eagerly."""
    from harness.judge.compare import VerdictPolicy
    from harness.inductor_compat.launches import load_generated_module
    from harness.layout import clone_exact
    from harness.judge.tolerances import Tolerance

    directory = Path(directory)
    manifest = json.loads((directory / MANIFEST).read_text())
    saved = torch.load(directory / LAUNCH_FILE, weights_only=True)
    target = torch.device(device)
    args, kwargs = unpack(saved["launch"], target)
    inputs = [clone_exact(t, device=target) for t in saved["inputs"]]
    tolerances = {dtype_named(k): Tolerance(**v) for k, v in manifest.get("tolerances", {}).items()}
    verdict = VerdictPolicy(tolerances, accumulated=manifest["kernel"]["accumulates"], **manifest.get("verdict", {}))
    try:
        expected_outputs = graph(*inputs)
    except Exception as exc:  # noqa: BLE001
        return KernelCheck(False, error=f"the subgraph does not run eagerly here: {type(exc).__name__}: {exc}")
    try:
        handler = _handler(inject)
        module = load_generated_module(str(directory / MODULE_FILE), getattr(handler, "rewriters", ()))
        _launch(module, manifest["kernel"], args, kwargs, target, handler)
        missed = getattr(handler, "missed", lambda: None)() if handler is not None else None
        if missed:
            return KernelCheck(False, error=f"the injection hit nothing in this kernel ({inject}: {missed})")
    except Exception as exc:  # noqa: BLE001 - a launch that cannot run is said so, not a verdict
        return KernelCheck(False, error=f"launching {manifest['kernel']['name']} failed: {type(exc).__name__}: {exc}")
    lines, diverged = [], False
    references: list[Any] = []
    for written in saved["written"]:
        actual = kwargs[written["key"]] if isinstance(written["key"], str) else args[written["key"]]
        if written["output"] is not None:
            expected = expected_outputs[written["output"]].reshape(actual.shape)
        else:
            expected = written["expected"].to(target)
        expected = expected.to(actual.dtype)
        comparison = verdict.tensors(written["name"], actual, expected, pictures=False)
        if verdict.wants_reference(comparison) and written["output"] is not None:
            # As the run judged it: a float result beyond tolerance may still be as close to float64 as eager.
            reference = _float64_outputs(graph, inputs, references)
            if reference is not None:
                comparison = verdict.tensors(
                    written["name"],
                    actual,
                    expected,
                    reference[written["output"]].reshape(actual.shape),
                    pictures=False,
                )
        diverged |= not comparison.passed
        lines.append(
            f"{written['name']}: {'matches' if comparison.passed else 'DIVERGES'} "
            f"(bad={comparison.bad}/{comparison.numel} max_abs={comparison.max_abs})"
        )
    return KernelCheck(diverged, lines)


def _float64_outputs(graph: Callable[..., Any], inputs: list[torch.Tensor], made: list[Any]) -> Any:
    """The subgraph run on float64 copies of its float inputs, once (None when it cannot run so: a dtype its
    code names may not allow it)."""
    if not made:
        try:
            made.append(graph(*[t.to(torch.float64) if t.is_floating_point() else t for t in inputs]))
        except Exception:  # noqa: BLE001 - then the verdict is by tolerance alone
            made.append(None)
    return made[0]


def pack(args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Launch arguments for `torch.save`: each storage once, as bytes (arguments may view one storage as
    different dtypes, which `torch.save` refuses), and each tensor as its view of one."""
    storages: list[torch.Tensor] = []
    index: dict[int, int] = {}

    def one(item: Any) -> Any:
        if not isinstance(item, torch.Tensor):
            return {"value": item}
        key = item.untyped_storage().data_ptr()
        if key not in index:
            index[key] = len(storages)
            storages.append(torch.empty(0, dtype=torch.uint8).set_(item.untyped_storage().cpu()).clone())
        return {
            "storage": index[key],
            "dtype": dtype_name(item.dtype),
            "size": list(item.shape),
            "stride": list(item.stride()),
            "offset": item.storage_offset(),
        }

    return {"storages": storages, "args": [one(a) for a in args], "kwargs": {k: one(v) for k, v in kwargs.items()}}


def unpack(packed: dict[str, Any], device: torch.device) -> tuple[list[Any], dict[str, Any]]:
    """The launch's arguments on `device`, storages shared as in the launch."""
    storages = [s.to(device, copy=True) for s in packed["storages"]]

    def one(item: dict[str, Any]) -> Any:
        if "value" in item:
            return item["value"]
        whole = storages[item["storage"]].view(dtype_named(item["dtype"]))
        return whole.as_strided(item["size"], item["stride"], item["offset"])

    return [one(a) for a in packed["args"]], {k: one(v) for k, v in packed["kwargs"].items()}


def _handler(inject: str | None) -> Any:
    if not inject:
        return None
    from harness.inject.launch import make_handler

    return make_handler(inject)


def _launch(
    module: Any, kernel: dict[str, Any], args: list[Any], kwargs: dict[str, Any], device: torch.device, handler: Any
) -> None:
    from harness.inductor_compat import intercept_launches
    from harness.inductor_compat.launches import extern_kernel, raw_stream

    name = kernel["name"]
    if kernel["kind"] == "extern":
        function = extern_kernel(module, name)
        call = lambda: function(*args, **kwargs)  # noqa: E731
    elif kernel["kind"] == "triton":
        proxy = getattr(module, name)
        if device.type != "cpu":  # the launch's stream was another process's
            kwargs = {**kwargs, "stream": raw_stream(device)}
        call = lambda: proxy.run(*args, **kwargs)  # noqa: E731
    else:
        proxy = getattr(module, name)
        call = lambda: proxy(*args, **kwargs)  # noqa: E731
    with intercept_launches(handler) if handler is not None else contextlib.nullcontext():
        call()
    from harness.devices import get_device

    get_device(device.type).synchronize()
