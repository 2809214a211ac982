"""Inductor's CPU C++ codegen registered for device "npu": its memory is host memory, so CPU kernels run on it.

Generated wrappers allocate with `empty_strided(..., device='npu')` and pass the tensors' data pointers to
the C++ kernels; a kernel call is written as for the CPU (Inductor's wrapper writes calls for the CPU, CUDA,
XPU and MPS only). Inductor takes some decisions for C++ kernels by asking whether a node is on the CPU
(`BaseSchedulerNode.is_cpu`, `ir.is_cpu`: no loop reindexing for fusion, the CPU's realize thresholds) or which
backend generates the device's code (`utils.get_current_backend`, which says "triton" for any device it does
not know: the C++ codegen would then keep bfloat16 values in float32 vectors and store them as such, past the
end of the buffer); here the npu answers as the CPU, since its kernels are the CPU's.
"""

from __future__ import annotations

import torch

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    from torch._dynamo.device_interface import CpuInterface, register_interface_for_device
    from torch._inductor.codegen.common import (
        DeviceOpOverrides,
        register_backend_for_device,
        register_device_op_overrides,
    )
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

    class HostInterface(CpuInterface):
        @staticmethod
        def is_available() -> bool:
            return True

    class HostOps(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            return f"def {name}(index): return 0"

        def set_device(self, device_idx: int) -> str:
            return "pass"

        def synchronize(self) -> str:
            return "pass"

        def device_guard(self, device_idx: int) -> str:
            return "contextlib.nullcontext()"

    class HostWrapper(PythonWrapperCodegen):
        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return HostWrapper()

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, **kwargs):
            from torch._inductor.virtualized import V

            device = device or V.graph.get_current_device_or_throw()
            if device.type == "npu":
                device = torch.device("cpu")
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    import sys

    from torch._inductor import ir, scheduler, utils

    def node_is_cpu(self) -> bool:
        device = self.get_device()
        return device is not None and device.type in ("cpu", "npu")

    def is_cpu(x) -> bool:
        return ir.get_device_type(x) in ("cpu", "npu")

    backend_of = utils.get_current_backend

    def get_current_backend(device_type=None):
        from torch._inductor.virtualized import V

        device_type = device_type or V.graph.get_current_device_or_throw().type
        return backend_of("cpu" if device_type == "npu" else device_type)

    scheduler.BaseSchedulerNode.is_cpu = node_is_cpu
    ir.is_cpu = is_cpu
    # Imported by name in codegen.common, scheduler and others (all loaded by now): replaced there too.
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("torch._inductor")]:
        if getattr(module, "get_current_backend", None) is backend_of:
            module.get_current_backend = get_current_backend

    register_interface_for_device("npu", HostInterface)
    register_device_op_overrides("npu", HostOps())
    from .. import _codegen_config as codegen_config

    register_backend_for_device(
        "npu", CppScheduling, HostWrapper, CppWrapperCpu, device_custom_config=codegen_config
    )  # its mode in the cache keys
    _registered = True
