"""How a program runs in each mode, eager or compiled, producing named result tensors.

- inference: the outputs (`out0`, ...) and in-place updates of inputs (`mutated_in0`, ...);
- training: also the gradients of inputs (`grad_in0`) and parameters
  (`grad.<name>`) for fixed random cotangents;
- train_step: one optimizer step, as torchbench's accuracy check runs it:
  zero_grad, forward, loss, backward, SGD step, the whole step compiled;
  results are `loss`, every parameter's `grad.<name>` and updated `param.<name>`.

Every run works on exact copies (layouts kept) of the inputs and of the module,
so eager, compiled and float64 runs never share state.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch.utils._pytree import tree_flatten

from .devices import Device
from .inputs import TensorSpec, clone_exact, materialize

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

    def float64(self) -> "Inputs":
        return self.copy(lambda t: torch.float64 if t.is_floating_point() else None)


def materialize_inputs(args: Any, kwargs: Mapping[str, Any], dtype: torch.dtype, device: Device, seed: int) -> Inputs:
    """Specs become tensors on the device (values drawn on the CPU, in order, from one seeded generator)."""
    generator = torch.Generator().manual_seed(seed)

    def one(item: Any) -> Any:
        if isinstance(item, TensorSpec):
            return materialize(item.with_dtype(dtype), generator, device.torch_device())
        if isinstance(item, torch.Tensor):
            return clone_exact(item.to(device.torch_device()))
        return item

    return Inputs([one(a) for a in args], {k: one(v) for k, v in kwargs.items()})


def execute(fn: Callable[..., Any], inputs: Inputs, mode: str, device: Device, seed: int,
            wrap: Wrap = lambda f: f, float64: bool = False) -> dict[str, torch.Tensor]:
    """Run `fn` (wrapped by `wrap`, e.g. torch.compile) on copies of `inputs`; returns named tensors."""
    run = inputs.float64() if float64 else inputs.copy()
    if isinstance(fn, torch.nn.Module):
        fn = copy.deepcopy(fn)
        if float64:
            fn = fn.double()
    results = _MODES[mode](fn, run, seed, wrap)
    device.synchronize()
    return results


def _inference(fn: Callable[..., Any], inputs: Inputs, seed: int, wrap: Wrap) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return _forward(wrap(fn), inputs)[0]


def _training(fn: Callable[..., Any], inputs: Inputs, seed: int, wrap: Wrap) -> dict[str, torch.Tensor]:
    with torch.enable_grad():
        named, outputs = _forward(wrap(fn), inputs)
        named.update(_gradients(fn, inputs, outputs, seed))
    return named


def _forward(fn: Callable[..., Any], inputs: Inputs) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    tensors_in = list(enumerate(inputs.args)) + list(inputs.kwargs.items())
    versions = {key: value._version for key, value in tensors_in if isinstance(value, torch.Tensor)}
    flat_outputs, _ = tree_flatten(fn(*inputs.args, **inputs.kwargs))
    outputs = [t for t in flat_outputs if isinstance(t, torch.Tensor)]
    named = {f"out{i}": t.detach() for i, t in enumerate(outputs)}
    # In-place updates of inputs are results too (the version counter says which happened).
    named.update({f"mutated_in{key}": value.detach() for key, value in tensors_in
                  if key in versions and value._version != versions[key]})
    return named, outputs


def _gradients(fn: Callable[..., Any], inputs: Inputs, outputs: list[torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    wrt = [(f"grad_in{key}", value) for key, value in list(enumerate(inputs.args)) + list(inputs.kwargs.items())
           if isinstance(value, torch.Tensor) and value.requires_grad]
    if isinstance(fn, torch.nn.Module):
        wrt += [(f"grad.{n}", p) for n, p in fn.named_parameters() if p.requires_grad]
    differentiable = [t for t in outputs if t.requires_grad]
    if not wrt or not differentiable:
        raise RuntimeError("training mode needs an input or parameter that requires grad and an output that depends on it")
    generator = torch.Generator().manual_seed(seed ^ 0x5EED)
    # The same cotangents for eager, compiled and the fp64 reference: drawn on the CPU in float64.
    cotangents = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.device, t.dtype)
                  for t in differentiable]
    grads = torch.autograd.grad(differentiable, [t for _, t in wrt], cotangents, allow_unused=True)
    return {name: g for (name, _), g in zip(wrt, grads) if g is not None}


def _train_step(model: Any, inputs: Inputs, seed: int, wrap: Wrap) -> dict[str, torch.Tensor]:
    if not isinstance(model, torch.nn.Module):
        raise TypeError("train_step mode needs an nn.Module program")
    optimizer = torch.optim.SGD(model.parameters(), lr=TRAIN_STEP_LR, foreach=True)

    def step(*args: Any, **kwargs: Any) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model(*args, **kwargs))
        loss.backward()
        optimizer.step()
        return loss.detach()

    with torch.enable_grad():
        loss = wrap(step)(*inputs.args, **inputs.kwargs)
    named = {"loss": loss}
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            named[f"grad.{name}"] = parameter.grad.detach()
        named[f"param.{name}"] = parameter.detach()
    return named


def loss_of(output: Any) -> torch.Tensor:
    """The loss of a model's output, as torchbench takes it: `.loss`, else the first element."""
    if isinstance(output, Mapping) and "loss" in output:
        return output["loss"]
    loss = getattr(output, "loss", None)
    if loss is None:
        loss = output[0] if isinstance(output, (tuple, list)) else output
    return loss if loss.dim() == 0 else loss.sum()


_MODES = {"inference": _inference, "training": _training, "train_step": _train_step}
