"""`triton_experimental._activate` of torch_npu 2.14.0: the Inductor config it writes when the backend loads.

From `triton_experimental/__init__.py` (`layout_optimization`, `coordinate_descent_tuning`, `split_reductions`:
"split reductions ... have hit OOB / shape-mismatch on the NPU Triton backend") and `overrides.py`
(`size_asserts` off at import; `shape_padding` off and Dynamo's recursive dict-tag guards off, both on by
its config's defaults). Loading the backend imports its own config module too (`config`, through its codegen).
"""

from __future__ import annotations


def _activate():
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    from . import config  # noqa: F401  (torch_npu's codegen, which the backend registers, imports it)

    inductor_config.layout_optimization = False
    inductor_config.coordinate_descent_tuning = False
    inductor_config.split_reductions = False
    inductor_config.size_asserts = False
    inductor_config.shape_padding = False
    if hasattr(dynamo_config, "use_recursive_dict_tags_for_guards"):
        dynamo_config.use_recursive_dict_tags_for_guards = False
