"""The `triton_experimental` backend's own config module, as torch_npu 2.14.0 ships it
(`torch_npu/_inductor/triton_experimental/config.py`): typed module-level defaults made a ConfigModule by
`install_config_module`, read by its codegen (`if config.rsplit_outer: ...`). A few of its 78 entries, with
torch_npu's defaults; the surrogate's codegen reads none of them."""

import sys
from typing import Optional

from torch.utils._config_module import install_config_module

# Cross-core r-axis split for outer reductions (40-core partial + combine).
rsplit_outer: bool = True
# Register lane-slice (extract_slice) rewrite for stride-k select loads.
select_extract_slice: bool = True
# Linearize triton codegen (the NPU flat-index codegen path).
codegen_linearize: bool = True
# Drop the dead accumulator `tl.where` guard in reductions.
elide_reduction_where: bool = True
vf_merge_level: Optional[int] = None

install_config_module(sys.modules[__name__])
