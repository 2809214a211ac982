"""Dynamo's and Inductor's bookkeeping the runner reads: graph counts, mode options."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator

# torch's structured-trace logger emits a DEBUG record per compile event for TORCH_TRACE. pytest attaches its
# capture handlers to every non-propagating logger, so without TORCH_TRACE those records fill a failure's
# "Captured log call" with a hundred empty lines.
_TRACE_LOGGER = "torch.__trace"


class _NoGraphBreaks(logging.Filter):
    """Dynamo's graph-break warnings (a dozen lines each): records summarize them (`graph_break_reasons`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Graph break" not in record.getMessage()


def quiet_torch_logging() -> None:
    """Keep torch's own logging out of the harness's output, unless the user asked for it (TORCH_TRACE,
    TORCH_LOGS)."""
    if not os.environ.get("TORCH_TRACE"):
        trace = logging.getLogger(_TRACE_LOGGER)
        if trace.level != logging.WARNING:  # setLevel clears every logger's cache: once, not per case
            trace.setLevel(logging.WARNING)
        # torch's structured tracing serializes each event to JSON whenever its logger has a handler. The
        # handler torch installs without TORCH_TRACE removes itself on its first record, which the level
        # above never lets through: every compile would then pay for JSON nobody reads.
        trace.handlers = [h for h in trace.handlers if type(h).__name__ != "LazyTraceHandler"]
    if not os.environ.get("TORCH_LOGS"):
        for name in ("torch", "torch._dynamo"):
            for handler in logging.getLogger(name).handlers:
                if not any(isinstance(f, _NoGraphBreaks) for f in handler.filters):
                    handler.addFilter(_NoGraphBreaks())


def reset_dynamo_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()


def compile_ids() -> tuple[object, ...]:
    """Dynamo's compilation metrics so far, as a mark for `recompile_reasons`. The entries themselves, not their
    compile ids (`frame/recompile`): those start again after every `torch.compiler.reset()`, so a "0/1" of an
    earlier case in this process would hide this one's (held here, no entry's identity is reused meanwhile)."""
    from torch._dynamo.utils import get_compilation_metrics

    return tuple(get_compilation_metrics())


def recompile_reasons(before: tuple[object, ...]) -> list[str]:
    """Why Dynamo compiled a frame again since `compile_ids` returned `before`: the guard that failed, as its
    compilation metrics keep it (`CompilationMetrics.recompile_reason`, torch 2.5 on)."""
    from torch._dynamo.utils import get_compilation_metrics

    seen = {id(m) for m in before}
    return [
        str(reason).strip()
        for m in get_compilation_metrics()
        if id(m) not in seen
        if (reason := getattr(m, "recompile_reason", None))
    ]


def compile_cache_hits() -> int:
    """Compiled graphs taken from Inductor's FX graph cache or AOT autograd's cache since the last reset."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"])


@contextlib.contextmanager
def compile_caches_off() -> Iterator[None]:
    """Inductor's FX graph cache and AOT autograd's cache off while the block runs: every graph is lowered."""
    import torch._functorch.config as functorch_config
    from torch._inductor import config as inductor_config

    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        yield


@contextlib.contextmanager
def room_to_recompile(at_least: int = 64) -> Iterator[None]:
    """Dynamo's recompile limit raised while the block runs: localization compiles one program under other
    backends and configs, each a new cache entry of the same code; past the limit (8) Dynamo would run the
    frame eagerly and the check would judge eager against eager. `recompile_limit` from torch 2.7, before it
    `cache_size_limit`."""
    import torch._dynamo.config as dynamo_config

    pairs = (("recompile_limit", "cache_size_limit"), ("accumulated_recompile_limit", "accumulated_cache_size_limit"))
    names = [
        next(name for name in pair if hasattr(dynamo_config, name))
        for pair in pairs
        if any(hasattr(dynamo_config, name) for name in pair)
    ]
    raised = {name: max(getattr(dynamo_config, name), at_least) for name in names}
    with dynamo_config.patch(**raised):
        yield


def distinct_inductor(options: dict[str, Any], dynamic: bool | None) -> Any:
    """Inductor as `torch.compile(backend="inductor", options=options)` makes it, but equal to no other
    instance. Dynamo reuses a cache entry whose backend compares equal (torch's `_TorchCompileInductorWrapper`
    compares by config), so a second compile with the same options, under a changed pass set, would run the
    first one's code."""
    import torch

    class Distinct(torch._TorchCompileInductorWrapper):
        __hash__ = object.__hash__

        def __eq__(self, other: object) -> bool:
            return self is other

    return Distinct(None, options, dynamic)


def dynamo_graph_counts() -> dict[str, int]:
    """Graphs Dynamo compiled and graph breaks it took since the last reset (`torch._dynamo.utils.counters`)."""
    from torch._dynamo.utils import counters

    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }


def graph_break_reasons(limit: int = 5) -> list[str]:
    """The most frequent graph-break reasons since the last reset, with their counts."""
    from torch._dynamo.utils import counters

    ranked = sorted(counters["graph_break"].items(), key=lambda item: -item[1])[:limit]
    # A reason's first line names it; the rest is Dynamo's explanation and hints.
    return [f"{count}x {reason.strip().splitlines()[0] if reason.strip() else reason}" for reason, count in ranked]


def mode_options(mode: str) -> dict[str, Any]:
    """The Inductor options a torch.compile mode stands for (`torch._inductor.list_mode_options`)."""
    from torch._inductor import list_mode_options

    return dict(list_mode_options(mode))


def backend_problem(backend: str) -> str | None:
    """Why `--backend` cannot compile, or None: a name Dynamo has no backend for (`torch._dynamo.list_backends`,
    its entry-point backends included)."""
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if backend in known:
        return None
    return f"--backend {backend}: Dynamo has no such backend (it has {', '.join(sorted(known))})"


def compile_mode_problem(mode: str) -> str | None:
    """Why `--compile-mode` cannot be used, or None (`torch._inductor.list_mode_options` knows the modes)."""
    from torch._inductor import list_mode_options

    try:
        list_mode_options(mode)
    except RuntimeError as exc:
        return f"--compile-mode {mode}: {exc}"
    return None


def inductor_option_names() -> set[str]:
    """Every Inductor config option of this torch (`torch._inductor.config.get_config_copy`)."""
    from torch._inductor import config as inductor_config

    return set(inductor_config.get_config_copy())


def inductor_option_problem(key: str, value: object) -> str | None:
    """Why `--compile-option key=value` cannot be used, or None: an unknown option, or a value of another type
    than the option's declared one (`_ConfigEntry.value_type`, else its default's type: torch 2.6 to 2.13), so
    that `max_autotune=maybe` is a usage error before any case, not a compile error in every case."""
    import torch
    from torch._inductor import config as inductor_config

    if key not in inductor_option_names():
        return f"--compile-option {key!r} is not an Inductor config option of torch {torch.__version__}"
    entry = getattr(inductor_config, "_config", {}).get(key)
    if entry is None or getattr(entry, "default", None) is None:
        return None  # no declared type to check against
    expected = getattr(entry, "value_type", None) or type(entry.default)
    checks = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
    }
    if expected in checks and not checks[expected](value):
        return f"--compile-option {key}={value!r}: {key} takes a {expected.__name__} (default {entry.default!r})"
    return None


def load_kernels_afresh() -> None:
    """Make the next compile load its program as a new process would, from the warm caches: Dynamo's frames are
    dropped (`torch.compiler.reset`), and so are the two tables that hand a loaded Triton kernel back instead of
    making it anew: `async_compile.CompiledTritonKernels` (torch 2.6 to 2.13), and the modules that
    `PyCodeCache.load_by_key_path` keeps when it loads without attributes (`modules_no_attr`), which is how a
    kernel's own module is loaded with one compile thread and under Triton's interpreter. Wrapper modules run
    anew at every load (they are loaded with attributes), so their kernels are new objects and each one's next
    launch is its first."""
    import torch

    torch.compiler.reset()
    from torch._inductor.codecache import PyCodeCache

    getattr(PyCodeCache, "modules_no_attr", {}).clear()
    try:
        from torch._inductor.async_compile import CompiledTritonKernels
    except ImportError:  # a torch without the table: every load makes its kernels anew
        return
    CompiledTritonKernels.cache_clear()


def warm_compiler(options: dict | None = None, device: str = "cpu") -> None:
    """Compile and run one tiny program with Inductor on `device`, then reset. A process's first compile pays
    seconds of lazy set-up (Dynamo, AOT autograd, Inductor's C++ toolchain checks); a process forked after
    this pays none of it (0.05 s against 3 s for a small program, on two CPU cores, torch 2.13). Its two
    elements run on one thread: no OpenMP thread pool is made, which would hang every later fork. `options` are
    the device's own compile options (the NPU's `npu_backend`): torch_npu's compile wrapper loads the backend a
    compile names for every compile, a CPU one too, so the warm-up loads the one the cases will ask for.
    `device` is the run's: Inductor sets its pattern passes up once per device a process compiles for
    (`pattern_matcher.init_once_fakemode` caches `lazy_init` by input device, torch 2.13), so a warm-up on
    another device would leave that device's patterns registered beside the run's in every case process."""
    import torch

    torch.compile(lambda x: x + 1, options=options or None)(torch.ones(2, device=device))
    # A module's first trace sets up Dynamo's nn.Module handling (a quarter of a second). Without grad: a training
    # graph's tracing starts the autograd engine's device threads, and a fork's backward on a device then fails.
    with torch.no_grad():
        module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2), torch.nn.GELU())
        module = module.to(device).requires_grad_(False)
        torch.compile(module, options=options or None)(torch.ones(1, 2, device=device))
    torch.compiler.reset()


def threads_reset_at_fork() -> set:
    """The threads a forked process does without, since torch resets their owners in the child: the readers of
    Inductor's compile-worker pools (`SubprocPool.read_thread`, named "InductorSubproc"), whose pools
    `async_compile.after_fork` forgets in every forked child, which starts its own when it compiles (torch 2.6 to
    2.13, `os.register_at_fork` in `async_compile.py`). Inductor's thread pool (`AsyncCompile.pool`) is not reset
    there, and is not among them."""
    try:
        from torch._inductor.async_compile import _pool_set
    except ImportError:
        return set()
    return {thread for pool in _pool_set if (thread := getattr(pool, "read_thread", None)) is not None}


def preload_compiler() -> None:
    """Import what a first compile would import lazily (Dynamo, AOT autograd, Inductor's compiler and caches)."""
    import torch._dynamo  # noqa: F401
    import torch._functorch.aot_autograd  # noqa: F401
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    # The hash of torch's own sources that every compile's cache key holds (`codecache.torch_key`, torch 2.2 to
    # 2.13, computed once a process: 0.12 to 0.19 s on two cores), here once for every process forked after. It
    # reads torch's files only: the same wherever a compiler's backend loads later (the torch_npu mode's workers
    # warm nothing else).
    torch_key = getattr(torch._inductor.codecache, "torch_key", None)
    if torch_key is not None:
        torch_key()
