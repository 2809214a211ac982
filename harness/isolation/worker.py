"""A worker process: runs case after case for its parent, each in a process of its own, and dies with the parent.

Started by `harness.isolation.pool` as `python -m harness.isolation.worker` in a process
session of its own, with stdout and stderr going to a log file (a case's own
output, or a child process it starts, never holds the harness's console).
It imports torch, the compiler and the harness, and runs no case code: each
task runs in a case process forked from it (`harness.isolation.case_process`), whose
values a process forked from it judges (`harness.judge.sent_values`). Its two channels to the harness
(`harness.isolation.channel`) are closed in every case process: tasks arrive as JSON
lines on what was stdin, answers go out as framed lines on the pipe
HARNESS_RESULT_FD named, each naming the task's run id: `{"loading": ...}`
while the case process imports the case's module (under the import
deadline), `{"started": ...}` when the case begins (the timeout counts from
there), then `{"record": ...}`, or `{"lost": ...}` / `{"corrupted": ...}`
when the case process died or wrote what the harness did not.

It is a child subreaper (`harness.isolation.process_tree`): every process a case starts
stays its descendant, and is killed when its case process is done. If the
parent dies (SIGKILL, a cancelled CI job), the worker kills all of them and
itself (a parent-death signal, and a watchdog thread in case the signal's
handler cannot run); no case code runs here, so neither can be undone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Callable

from harness.isolation import child as child_process, process_tree
from harness.isolation.channel import Sender, closer, take_private
from harness.records.run_config import RunConfig

PARENT_POLL_S = 0.25


def _die() -> None:
    process_tree.kill_descendants(os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


def _die_with_parent(parent: int) -> None:
    """Kill this process and every descendant when the parent goes away."""
    process_tree.become_subreaper()
    signal.signal(signal.SIGUSR2, lambda signum, frame: _die())
    process_tree.signal_on_parent_death(signal.SIGUSR2)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                _die()
            time.sleep(PARENT_POLL_S)

    threading.Thread(target=watch, daemon=True, name="harness-parent-watchdog").start()
    if os.getppid() != parent:  # it died before the signal was asked for
        _die()


def _compiles_keep_forks_usable(config: RunConfig) -> bool | None:
    """Whether this process may compile and still fork case processes that can use their device; None where
    only a trial can tell (`_warm_up`). Not where a GPU is visible, whatever the run's device: every Dynamo
    compile saves CUDA's RNG state when CUDA is available (`preserve_global_state`, torch/_dynamo/convert_frame.py,
    torch 2.11 and 2.13), which initialises CUDA, and a process forked after that cannot use CUDA ("Cannot
    re-initialize CUDA in forked subprocess"). Otherwise as the device's compiler says
    (`Device.compiles_keep_forks_usable`: torch_npu's backends leave it to a trial). `is_available` asks NVML
    here (PYTORCH_NVML_BASED_CUDA_CHECK), which starts no CUDA context."""
    import torch

    from harness.devices import get_device

    if torch.cuda.is_available():
        return False
    return get_device(config.device).compiles_keep_forks_usable()


def _threads_forks_lose(before: set[threading.Thread]) -> list[str]:
    """The threads started since `before` that a process forked now would miss while still relying on them (a
    thread pool's idle workers: a task given to the pool in the fork waits for ever), by name; empty when a fork
    is as good as a fresh process. tqdm's monitor, which every compile starts (torch.fx's Interpreter opens a
    progress bar), is stopped first: a fork landing while it holds tqdm's lock would leave that lock held in the
    case process, and tqdm starts a new monitor on its next bar there (`TMonitor.report` is false once it
    exited). Inductor's compile-pool readers are reset by torch itself in the fork (`threads_reset_at_fork`)."""
    from harness.inductor_compat import threads_reset_at_fork

    monitor = sys.modules.get("tqdm._monitor")
    started = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for thread in started:
        if monitor is not None and isinstance(thread, monitor.TMonitor):
            thread.exit()
    reset = threads_reset_at_fork()
    return sorted({t.name for t in started if t.is_alive() and t not in reset})


def _warm_up(config: RunConfig, runs_per_worker: int | None = None) -> bool:
    """Compile in this process before forking case processes, so that none pays its first compile's set-up
    (`warm_compiler`), where the device says that leaves forks usable; where only a trial can tell, the warm-up
    runs first in a process forked for it, and this one warms up only when nothing it started would be lost in a
    fork (torch_npu's `default` backend starts a thread pool as it loads; its `triton_experimental` only what
    torch resets in a fork). A trial costs a warm-up: it pays from a worker's second case on, so a worker with one
    case to run (`runs_per_worker`, where known) compiles that one from cold. True when warmed."""
    from harness.devices import get_device
    from harness.inductor_compat import warm_compiler

    usable = _compiles_keep_forks_usable(config)
    if usable is False or (usable is None and runs_per_worker is not None and runs_per_worker < 2):
        return False
    device = get_device(config.device)
    options = device.compile_options(config)

    def warm() -> list[str]:
        before = set(threading.enumerate())
        warm_compiler(options, device=str(device.torch_device()))
        return _threads_forks_lose(before)

    if usable is None:
        lost = _trial(warm)
        if lost is None or lost:
            why = (
                "it failed" if lost is None else f"it leaves threads running that a fork would lack: {', '.join(lost)}"
            )
            print(
                f"harness: the compiler is not warmed up before forking ({why}): each case process compiles from cold",
                file=sys.stderr,
                flush=True,
            )
            return False
    lost = warm()
    if lost:  # a declared device broke its word: its cases may hang, and the log says why
        print(f"harness: warning: the compiler's warm-up left threads running ({', '.join(lost)})", file=sys.stderr)
    return True


def _trial(warm: Callable[[], list[str]]) -> list[str] | None:
    """`warm()`'s answer, from a process forked to run it; None when that process gave none (it failed)."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            answer = json.dumps(warm()).encode()
            os.write(write_end, answer)
        except BaseException:  # noqa: BLE001 - told by the empty answer
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    try:
        return list(json.loads(text))
    except ValueError:
        return None


def main() -> int:
    if child_process.RESULT_FD_VARIABLE not in os.environ:
        print(
            "error: harness.isolation.worker is started by the harness (its pool), not by hand: no result channel "
            f"({child_process.RESULT_FD_VARIABLE})",
            file=sys.stderr,
        )
        return 2
    parent = int(os.environ.pop(child_process.PARENT_PID_VARIABLE, os.getppid()))
    _die_with_parent(parent)
    tasks, result_stream = take_private(child_process.RESULT_FD_VARIABLE)
    results = Sender(result_stream, tasks.readline().strip())
    # torch.cuda.is_available() through NVML, which leaves CUDA uninitialised here: a process forked from this
    # one can still use the device.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

    import gc

    import torch  # noqa: F401 - imported once here, by every case process through the fork

    from harness.isolation import residue as case_residue
    from harness.judge import sent_values as judge
    from harness.run import case as runner
    from harness.isolation.case_process import CaseForker
    from harness.inductor_compat import pick_cpu_vec_isa, preload_compiler

    case_residue.track_thread_starts()
    # What is imported now lives as long as the worker: out of the collector's sight, its collections scan
    # only what cases create (a tenth of the objects, a tenth of the time).
    preload_compiler()
    gc.collect()
    gc.freeze()
    # The run's setup comes after the imports: a worker may be started before its run's options are known.
    line = tasks.readline()
    if not line:  # the harness stopped before there was a run (a usage error)
        return 0
    setup = json.loads(line)
    config = RunConfig.from_json(setup["config"])
    if setup.get("compile_root"):
        from harness.inductor_compat import compile_caches

        # Every compile of this worker and of its case processes under a directory of the run's own.
        from harness.isolation import confine

        setup["worker_root"] = compile_caches.new_root(setup["compile_root"], prefix="worker-")
        # The store of built headers is trusted where no case can write it: where case processes are confined.
        setup["headers_stored"] = confine.unconfined_reason() is None
        compile_caches.use_worker_caches(setup["worker_root"], stored=setup["headers_stored"])
    if getattr(config, "device", "") == "cpu":  # Inductor's CPU ISA probe, before the first case's clock starts
        pick_cpu_vec_isa()
    from harness.devices import get_device

    setup["preload_sources"] = get_device(config.device).imports_keep_forks_usable()
    # Every case process is forked from here: its first compile's set-up is done once.
    warmed = (
        setup.get("isolation") == "case"
        and config.backend == "inductor"
        and _warm_up(config, setup.get("runs_per_worker"))
    )
    if setup.get("worker_root"):
        if setup["headers_stored"] and warmed:
            compile_caches.store_headers()
        # A case process uses the worker's header only where the worker's own compile used it: Inductor remembers
        # the header per process (`_precompile_header` is cached), so a forked case never takes its lock, in a
        # folder it may not write. A worker whose compiles used none (not warmed up, or warmed up on a device
        # whose kernels are no C++) gives its cases none, even where it copied headers in from the store: each
        # case builds its own.
        setup["header_stamps"] = compile_caches.header_stamps()
    gc.collect()
    gc.freeze()

    forker = CaseForker(setup, config, results, closer(tasks, result_stream))
    try:
        for line in tasks:
            forker.run(json.loads(line))
    finally:
        forker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
