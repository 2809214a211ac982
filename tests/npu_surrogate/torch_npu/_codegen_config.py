"""Which code the surrogate generates for "npu", as an Inductor device config.

Inductor hashes each device's config into its compile-cache keys (`FxGraphHashDetails`'s
`custom_backend_codegen_configs`, from `register_backend_for_device(..., device_custom_config=)`), so a program
compiled in one mode is never loaded from the cache in the other (a Triton program in the C++ mode fails with
"No module named 'triton'"; a C++ one in the Triton mode is never probed as Triton).
"""

import sys

from torch.utils._config_module import install_config_module

codegen: str = "cpp"  # or "triton" (`NPU_SURROGATE_CODEGEN=triton`), or "torch_npu <version>"

install_config_module(sys.modules[__name__])
