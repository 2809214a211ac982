"""How a program runs in each mode, eager or compiled, producing named results.

- inference: the outputs (`out0`, ... for tensors, `out[1]['e']` for other
  leaves of the output tree);
- training: also the gradients of inputs (`grad_in0`) and parameters
  (`grad.<name>`) for fixed random cotangents;
- train_step: one optimizer step, as torchbench's accuracy check runs it:
  zero_grad, forward, loss, backward, SGD step, the whole step compiled;
  results are `loss`, every parameter's `grad.<name>` and updated `param.<name>`.

In every mode, the state a program can change in place is results too,
judged by value: every tensor input (`mutated_in<k>`), module buffer
(`buffer.<name>`) and, outside train_step, parameter (`param.<name>`) is
compared with its value before the run; a side that changed one reports it
(version counters are not trusted: eager's native batch norm updates its
running stats without bumping them).

A `Session` prepares one side once (module copy, optimizer, compile wrapper)
and runs it any number of times on exact copies (layouts kept) of the inputs,
restoring the module's state in between, so eager, compiled and float64 runs
never share state and a compiled program can run again without recompiling.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import torch
from torch.utils._pytree import keystr, tree_flatten_with_path

from harness.devices import Device
from harness.inputs import TensorSpec, materialize
from harness.judge.results import Results, same_values
from harness.layout import clone_exact

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]
# torchbench's optimizer for training accuracy runs.
TRAIN_STEP_LR = 0.01


@dataclass
class Inputs:
    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def map_tensors(self, fn: Callable[[torch.Tensor], Any]) -> "Inputs":
        def one(value: Any) -> Any:
            return fn(value) if isinstance(value, torch.Tensor) else copy.deepcopy(value)

        return Inputs([one(a) for a in self.args], {k: one(v) for k, v in self.kwargs.items()})

    def copy(self, dtype_for: Callable[[torch.Tensor], torch.dtype | None] = lambda t: None) -> "Inputs":
        return self.map_tensors(lambda t: clone_exact(t, dtype_for(t)))

    def float64(self, device: torch.device | str | None = None) -> "Inputs":
        """Exact copies with floats in float64 (on `device`, when given: the host, for a device without
        float64)."""
        return self.map_tensors(lambda t: clone_exact(t, torch.float64 if t.is_floating_point() else None, device))

    def named_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """(`mutated_in<k>`, tensor) for every tensor input, positional then keyword."""
        items = list(enumerate(self.args)) + list(self.kwargs.items())
        return [(f"mutated_in{key}", value) for key, value in items if isinstance(value, torch.Tensor)]


def materialize_inputs(args: Any, kwargs: Mapping[str, Any], dtype: torch.dtype, device: Device, seed: int) -> Inputs:
    """Specs become tensors on the device (values drawn on the CPU, in order, from one seeded generator)."""
    generator = torch.Generator().manual_seed(seed)

    def one(item: Any) -> Any:
        if isinstance(item, TensorSpec):
            return materialize(item.with_dtype(dtype), generator, device.torch_device())
        if isinstance(item, torch.Tensor):
            # The whole storage moves, so a non-dense layout stays what it was (`.to(device)` would make it dense).
            return clone_exact(item, device=device.torch_device())
        return item

    return Inputs([one(a) for a in args], {k: one(v) for k, v in kwargs.items()})


class Session:
    """One side of a comparison (eager, compiled, float64), prepared once and run any number of times."""

    def __init__(
        self,
        fn: Callable[..., Any],
        inputs: Inputs,
        mode: str,
        device: Device,
        seed: int,
        wrap: Wrap = lambda f: f,
        float64: bool = False,
        prepare: Callable[[list[Any], dict[str, Any]], None] | None = None,
    ):
        self.inputs, self.mode, self.device, self.seed, self.float64 = inputs, mode, device, seed, float64
        # Called with each run's own input copies before the program sees them (a dynamic run marks dims).
        self.prepare = prepare
        if float64 and hasattr(fn, "for_float64"):  # a program that fixes dtypes in its arguments (OpInfo's)
            fn = fn.for_float64()
        self.module = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else None
        if self.module is not None and float64:
            self.module = self.module.double()
        self._fn = self.module if self.module is not None else fn
        # The module's state before any run: every run starts from it, and mutations are judged against it.
        self._pristine = {name: clone_exact(t.detach()) for name, t in module_state(self.module)}
        self._runs = 0
        if mode == "train_step":
            self._callable = _train_step_callable(self._fn, wrap)
        else:
            self._callable = wrap(self._fn)

    def run(self) -> Results:
        if self._runs:
            self._restore_module()
        self._runs += 1
        run_inputs = self.inputs.float64(self.device.torch_device()) if self.float64 else self.inputs.copy()
        if self.prepare is not None:
            self.prepare(run_inputs.args, run_inputs.kwargs)
        with _default_dtype(torch.float64 if self.float64 else None):
            results = _MODES[self.mode](self, run_inputs)
        self.device.synchronize()
        _record_state(results, run_inputs, self.inputs, self.module, self._pristine, self.mode)
        return results

    def at(self, inputs: Inputs) -> "Session":
        """The same prepared program (compiled once, its module shared) run on other inputs: a dynamic run's
        second size. Its first run starts from the module's state before any run, as every run does."""
        other = copy.copy(self)
        other.inputs, other._runs = inputs, max(self._runs, 1)
        return other

    def _restore_module(self) -> None:
        with torch.no_grad():
            for name, tensor in module_state(self.module):
                tensor.copy_(self._pristine[name])
                if isinstance(tensor, torch.nn.Parameter):
                    tensor.grad = None


def module_state(module: torch.nn.Module | None) -> list[tuple[str, torch.Tensor]]:
    """A module's parameters and buffers, by the names results give them."""
    if module is None:
        return []
    return [(f"param.{n}", p) for n, p in module.named_parameters()] + [
        (f"buffer.{n}", b) for n, b in module.named_buffers() if b is not None
    ]


def _record_state(
    results: Results,
    run_inputs: Inputs,
    pristine_inputs: Inputs,
    module: torch.nn.Module | None,
    pristine_module: dict[str, torch.Tensor],
    mode: str,
) -> None:
    before = dict(pristine_inputs.named_tensors())
    for name, tensor in run_inputs.named_tensors():
        results.state[name] = tensor.detach()
        if not same_values(tensor.detach(), before[name]):
            results.changed.add(name)
    for name, tensor in module_state(module):
        if mode == "train_step" and name.startswith("param."):
            continue  # already results: every updated parameter is compared
        # A copy: the live tensor is restored before the session's next run.
        results.state[name] = clone_exact(tensor.detach())
        if not same_values(tensor.detach(), pristine_module[name].to(tensor.dtype)):
            results.changed.add(name)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    # The float64 reference: tensors a program makes without a dtype (`torch.zeros(n)`) are float64 too.
    if dtype is None:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _inference(session: Session, inputs: Inputs) -> Results:
    with torch.no_grad():
        return _forward(session._callable, inputs)[0]


def _training(session: Session, inputs: Inputs) -> Results:
    with torch.enable_grad():
        results, outputs = _forward(session._callable, inputs)
        results.values.update(_gradients(session._fn, inputs, outputs, session.seed))
    return results


class OutputNotComparable(Exception):
    """The program returned something no verdict can be reached on."""


# Values other than tensors that an output may hold: compared for equality (floats within tolerance).
COMPARABLE_VALUES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)


# Layouts compared through their dense values (`Tensor.to_dense`): what is compared is the values the tensor
# stands for, not how it stores them.
DENSIFIED_LAYOUTS = tuple(
    getattr(torch, name)
    for name in ("sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn")
    if hasattr(torch, name)
)


def _comparable_tensor(path: str, leaf: torch.Tensor) -> torch.Tensor:
    """The tensor whose values are compared for this output: itself, or its dense values."""
    if leaf.device.type == "meta":
        raise OutputNotComparable(f"output {path or 'out'} is a tensor on the meta device: it has no values to compare")
    if leaf.is_nested:
        raise OutputNotComparable(
            f"output {path or 'out'} is a nested tensor, which is not comparable element by element: "
            "return its components (`.unbind()`) instead"
        )
    if leaf.layout in DENSIFIED_LAYOUTS:
        return leaf.to_dense()
    return leaf


def _check_comparable(path: str, leaf: Any) -> None:
    if isinstance(leaf, torch.Tensor):
        return
    if not isinstance(leaf, COMPARABLE_VALUES):
        raise OutputNotComparable(
            f"output {path or 'out'} is a {type(leaf).__name__}: outputs are compared as "
            "tensors and plain values (numbers, strings, None) in lists, tuples and dicts; "
            "return those"
        )


def _forward(fn: Callable[..., Any], inputs: Inputs) -> tuple[Results, list[torch.Tensor]]:
    leaves = tree_flatten_with_path(fn(*inputs.args, **inputs.kwargs), is_leaf=lambda x: x is None)[0]
    results, tensors = Results(), []
    for path, leaf in leaves:
        _check_comparable(keystr(path), leaf)
        if isinstance(leaf, torch.Tensor):
            leaf = _comparable_tensor(keystr(path), leaf)
            name = f"out{len(tensors)}"
            tensors.append(leaf)
            results.values[name] = leaf.detach()
        else:
            name = f"out{keystr(path)}"
            results.values[name] = leaf
        results.paths[name] = keystr(path)
    return results, tensors


def _gradients(
    fn: Callable[..., Any], inputs: Inputs, outputs: list[torch.Tensor], seed: int
) -> dict[str, torch.Tensor]:
    wrt = [
        (f"grad_in{key}", value)
        for key, value in list(enumerate(inputs.args)) + list(inputs.kwargs.items())
        if isinstance(value, torch.Tensor) and value.requires_grad
    ]
    if isinstance(fn, torch.nn.Module):
        wrt += [(f"grad.{n}", p) for n, p in fn.named_parameters() if p.requires_grad]
    differentiable = [t for t in outputs if t.requires_grad]
    if not wrt or not differentiable:
        raise RuntimeError(
            "training mode needs an input or parameter that requires grad and an output that depends "
            "on it: give an input spec requires_grad=True (contiguous((8, 16), requires_grad=True)), "
            "or make the program an nn.Module with parameters"
        )
    generator = torch.Generator().manual_seed(seed ^ 0x5EED)
    # The same cotangents for eager, compiled and the fp64 reference: drawn on the CPU in float64.
    cotangents = [
        torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.device, t.dtype) for t in differentiable
    ]
    grads = torch.autograd.grad(differentiable, [t for _, t in wrt], cotangents, allow_unused=True)
    return {name: g for (name, _), g in zip(wrt, grads) if g is not None}


def _train_step_callable(model: Any, wrap: Wrap) -> Callable[..., torch.Tensor]:
    if not isinstance(model, torch.nn.Module):
        raise TypeError("train_step mode needs an nn.Module program")
    # SGD without momentum keeps no state, so a restored module is a fresh start.
    optimizer = torch.optim.SGD(model.parameters(), lr=TRAIN_STEP_LR, foreach=True)

    def step(*args: Any, **kwargs: Any) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model(*args, **kwargs))
        loss.backward()
        optimizer.step()
        return loss.detach()

    return wrap(step)


def _train_step(session: Session, inputs: Inputs) -> Results:
    with torch.enable_grad():
        loss = session._callable(*inputs.args, **inputs.kwargs)
    results = Results(values={"loss": loss})
    for name, parameter in session._fn.named_parameters():
        if parameter.grad is not None:
            results.values[f"grad.{name}"] = parameter.grad.detach()
        # A copy: the live parameter is restored before the session's next run.
        results.values[f"param.{name}"] = clone_exact(parameter.detach())
    return results


def loss_of(output: Any) -> torch.Tensor:
    """The loss of a model's output, as torchbench takes it: `.loss`, else the first element."""
    if isinstance(output, Mapping) and "loss" in output:
        return output["loss"]
    loss = getattr(output, "loss", None)
    if loss is None:
        loss = output[0] if isinstance(output, (tuple, list)) else output
    return loss if loss.dim() == 0 else loss.sum()


_MODES = {"inference": _inference, "training": _training, "train_step": _train_step}
