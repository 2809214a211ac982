"""Every use of Inductor internals, in one place.

Supported: torch 2.6 to 2.13 (checked: 2.13 on CPU, 2.11 on CUDA with Triton 3.6).
What is relied on, and why there is no public API for it:

- `PyCodeCache.load_by_key_path(key, path, ...)` loads each compiled wrapper
  module (fresh compiles and cache hits alike). Its module-level globals hold
  the generated kernels the wrapper's `call()` launches by name: C++ kernels as
  plain callables (`cpp_fused_*(*tensors)`), Triton kernels as
  `CachingAutotuner` objects (`triton_*.run(*args, stream=...)`; the NPU's
  autotuners subclass it). Replacing those globals with proxies observes every
  launch of the program the user runs without changing what was compiled.
- Kernel parameters follow Inductor's naming (`in_ptr*` read, `out_ptr*`
  written, `in_out_ptr*` both); Triton also lists `mutated_arg_names` in
  `inductor_meta` (C++ kernels have no such list). A Triton kernel's roles
  are read off its body where it says (`kernel_pointers.py`: what it
  `tl.store`s to): torch_npu's rsplit partial kernels write a `ws_ptr`. C++
  kernels have no metadata object: their parameter names
  come from the `extern "C" void kernel(...)` line of their source, the one
  piece of generated text read here.
- Extern kernels (mm, bmm, convolution, ...) are called as
  `extern_kernels.<op>(..., out=bufN)` through the module global
  `extern_kernels`; a proxy for it observes them as launches of kind "extern".
- Fallback calls (ATen fallbacks, custom ops) are written `torch.ops.<ns>.<op>.<overload>(...)` or
  `aten.<op>.<overload>(...)` (`FallbackKernel` codegen); the module globals `torch` and `aten` are replaced by
  proxies that observe those calls as launches of kind "fallback" (`launches._FallbackOps`). Codegen reports
  each call's buffer to provenance tracing under that same name; `MultiOutput` and `MutationOutput` buffers say
  which returned tensor and which written argument each one is (`graphs._fallback_facts`).
- The wrapper's module-level `call(args)` runs one compiled graph. Wrapping it
  lets bisection run the post-grad graph eagerly on the same inputs first.
  Inside `call`, kernel arguments are locals named after Inductor's buffers
  (`buf3`, `arg0_1`); the caller frame's locals name each launch argument.
- `GraphLowering.compile_to_module` holds the post-grad graph (`orig_gm`), the
  graph's input names, and each buffer's FX origins (`origin_node`,
  `origins`); `capture_graphs` records them for every graph compiled while it
  is active (FX graph and AOT autograd caches off, since a cache hit skips
  lowering; the generated code is the same). In a dynamic graph a buffer's
  sizes are sympy expressions in the ShapeEnv's symbols, and an FX value's
  shape holds SymInts of the same symbols: they are compared as expressions
  (`graphs._dims`; torch 2.13 on CPU, 2.11 on CUDA).
- `torch_npu_backend.py`: torch_npu's Inductor backend registry (torch_npu
  2.7.1 to 2.14.0, read in its wheels): a backend loaded as a compile would
  load it, before the config is saved, and which backend did load; and the
  launcher `triton_experimental` generates (2.13.0, 2.14.0), whose `runner`
  parameter default a replay replaces to see or change its grid.
- `dynamo.py`'s `threads_reset_at_fork`: the reader threads of Inductor's
  compile-worker pools (`async_compile._pool_set`), which torch forgets in a
  forked child (`async_compile.after_fork`, torch 2.6 to 2.13).
- `graph_passes.py`: Inductor's FX graph passes, observed (which changed a graph)
  and turned off one by one: `GraphTransformObserver.apply_graph_pass` /
  `apply_gm_pass` and `PatternEntry.apply`, the places every named pass and
  pattern rewrite runs through (torch 2.13's source; the same in 2.11).
- `cache_dir.py`: Inductor's cache directory, where the harness keeps what
  it learns once per host (the ISA verdicts below, the OpInfo catalogue).
- `compile_caches.py`: each case process compiles into caches of its own
  (`TORCHINDUCTOR_CACHE_DIR`, `TRITON_CACHE_DIR`); Inductor's precompiled
  C++ header (`codecache._HEADER_DIR`; torch 2.11 and 2.13, where it was checked)
  built once per worker.
- `cpu_isa.py`: Inductor's CPU vector-ISA build checks, remembered on disk
  (each process would otherwise probe again: tens of seconds on torch 2.11).
- `kernel_variants.py`: the text of generated reduction kernels (C++ and
  Triton), rewritten for the rewritten-kernel emulations; its docstring names
  the patterns and torch versions it relies on. `padding_variants.py` does the
  same for triton-ascend's masked-lane and narrow-tile reduction classes.
"""

from harness.inductor_compat import torch_state
from harness.inductor_compat.cache_dir import inductor_cache_dir, shared_cache_dir
from harness.inductor_compat.cpu_isa import pick_cpu_vec_isa, remember_vec_isa_checks
from harness.inductor_compat.versions import OLDEST_TORCH, NEWEST_TESTED_TORCH, torch_version_problem
from harness.inductor_compat.dynamo import (
    compile_cache_hits,
    compile_caches_off,
    compile_ids,
    distinct_inductor,
    dynamo_graph_counts,
    graph_break_reasons,
    load_kernels_afresh,
    mode_options,
    preload_compiler,
    quiet_torch_logging,
    recompile_reasons,
    reset_dynamo_counters,
    room_to_recompile,
    threads_reset_at_fork,
    warm_compiler,
)
from harness.inductor_compat.graph_passes import GraphPass, left_in_lowered, observing_passes
from harness.inductor_compat.graphs import (
    LOW_PRECISION,
    STATE_BEFORE_IN_PLACE,
    WIDER_FLOATS,
    BufferFact,
    Capture,
    GraphInfo,
    GraphObserver,
    adopt_facts,
    capture_graphs,
    erases_low_precision_cast,
    float64_copy,
    graph_info,
    install_lowering_hook,
    LowPrecisionCast,
    low_precision_casts,
    program_accumulates,
    written_inputs,
)
from harness.inductor_compat.launches import (
    ROLE_IN,
    ROLE_INOUT,
    ROLE_OUT,
    ROLE_SCALAR,
    KernelInfo,
    Launch,
    LaunchHandler,
    intercept_launches,
    low_precision_atomics,
)
