"""The compiled outputs of registry cases on the surrogate NPU, saved for a comparison between two interpreters.

    python tests/npu_interpreter_outputs.py OUT.pt CASE [CASE ...]

Run in one of the surrogate's Triton-kernel modes (`NPU_SURROGATE_CODEGEN=triton` or `torch_npu`), once with the
surrogate's interpreter speed-ups (`_interpreter_speed.py`) and once with `NPU_SURROGATE_INTERPRETER=stock`:
each case's program, compiled for "npu" in inference with its first dtype on inputs drawn from one seed, and its
outputs (host copies, flattened in order) saved to OUT.pt. `tests/test_npu_path.py` compares the two files.
"""

from __future__ import annotations

import sys


def main() -> None:
    import torch
    import torch_npu  # noqa: F401 - the surrogate: device "npu", its mode's compiler

    from harness.devices import get_device
    from harness.registry import load_registry
    from harness.run.program import materialize_inputs

    out, names = sys.argv[1], sys.argv[2:]
    registry = load_registry()
    device = get_device("npu")
    saved = {}
    for name in names:
        case = registry.cases[name]
        dtype = case.dtypes[0]
        program = case.build(dtype)
        inputs = materialize_inputs(program.inputs, program.kwargs, dtype, device, seed=0)
        torch._dynamo.reset()
        compiled = torch.compile(program.fn, options={"npu_backend": "triton_experimental"})
        with torch.no_grad():
            result = compiled(*inputs.args, **inputs.kwargs)
        leaves = torch.utils._pytree.tree_leaves(result)
        saved[name] = [t.detach().cpu() for t in leaves if isinstance(t, torch.Tensor)]
    torch.save(saved, out)


if __name__ == "__main__":
    main()
