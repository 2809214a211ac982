"""Case modules are imported in a child process: the harness's own process never runs a line of case code.

A case module is arbitrary Python: at import it may exit (`os._exit(0)`,
which would end a run with exit 0 and no record: a silent pass), crash
(a segfault), patch torch or print. The CLI and the pytest plugin therefore
ask a loader process (`python -m harness.case_loader`) for a selection.
It imports the modules, selects, and sends back each case as a plain
description (`describe`). The harness rebuilds `Case` objects from those
descriptions; their `build` only says where it runs (`BuiltInWorker`),
because a case is built in the worker that runs it, which imports the
module itself.

The loader process speaks on the framed channel (`harness.channel`), naming
each module before it imports it. If it dies, hangs past the import
deadline or sends what it did not write, the module it was importing becomes
a load error naming it, and a fresh loader goes on without that module. A
worker never imports a module found broken so (`broken_modules`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import process_tree
from .channel import ChannelCorrupted, Receiver, Sender, new_token, take_private

# Beyond the registry's own import deadline (a hang in Python code), before the harness gives up on a module
# whose import hangs in C code.
IMPORT_GRACE_S = 10.0
# What the selection may take once every module is imported (a case source generating its cases: OpInfo's
# full sweep, cold, takes about half a minute).
SELECTION_DEADLINE_S = 1800.0
LOG_TAIL_CHARS = 1500


class LoaderFailed(Exception):
    """The loader process could not run at all (torch does not import): a setup error, not a case's."""


@dataclass(frozen=True)
class BuiltInWorker:
    """The `build` of a case described by the loader: only a process that imports the case's module builds it."""

    name: str

    def __call__(self, dtype: Any) -> Any:
        raise RuntimeError(f"case {self.name!r} is built in a worker process, which imports its module")


# The case fields a description carries as they are (strings, numbers, bools, None, lists of strings).
_PLAIN_FIELDS = ("name", "tags", "modes", "dynamic", "issue", "size", "reference", "cosine_fallback",
                 "strict_eager", "compiles", "generated", "culprit", "requires", "description", "source")


def _json_value(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)  # shown in listings only: the worker compiles with the module's own objects


def describe(case: Any) -> dict[str, Any]:
    """A case as plain JSON (no code): enough for the harness to select, list, name and record its runs."""
    from .run_identity import dtype_name

    description = {name: _json_value(getattr(case, name)) for name in _PLAIN_FIELDS}
    description["dtypes"] = [dtype_name(d) for d in case.dtypes]
    description["tolerances"] = {dtype_name(d): [t.rtol, t.atol] for d, t in case.tolerances.items()}
    description["compile_options"] = {str(k): _json_value(v) for k, v in case.compile_options.items()}
    description["known_failures"] = [dataclasses.asdict(k) for k in case.known_failures]
    return description


def undescribe(description: dict[str, Any]) -> Any:
    """The `Case` a description stands for, with a `build` that runs only in a worker."""
    import torch

    from .registry import Case, KnownFailure
    from .tolerances import Tolerance

    plain = {name: description[name] for name in _PLAIN_FIELDS}
    for name in ("tags", "modes", "requires"):
        plain[name] = tuple(plain[name])
    return Case(build=BuiltInWorker(plain["name"]), **plain,
                dtypes=tuple(getattr(torch, d) for d in description["dtypes"]),
                tolerances={getattr(torch, d): Tolerance(*t) for d, t in description["tolerances"].items()},
                compile_options=dict(description["compile_options"]),
                known_failures=tuple(KnownFailure(**k) for k in description["known_failures"]))


@dataclass
class Loaded:
    """What the loader sent back: the cases chosen, every load error, and what it searched."""

    chosen: list[Any] = field(default_factory=list)
    errors: list[Any] = field(default_factory=list)  # registry.LoadError
    sources: list[str] = field(default_factory=list)
    case_count: int = 0
    # The selection could not be made (an unknown case name, a malformed -k): the message.
    usage: str | None = None
    # Modules whose import killed or hung the loader: never imported again in this run.
    broken_modules: list[str] = field(default_factory=list)
    # pytest: case module -> (cases, errors) of that module alone.
    by_module: dict[str, tuple[list[Any], list[Any]]] = field(default_factory=dict)
    # `harness list --skipped`: (what, why) pairs (None: no case source matched), or why a source cannot load.
    skipped: list[tuple[str, str]] | None = None
    skipped_error: str | None = None

    def describe_sources(self) -> str:
        return "searched: " + (", ".join(self.sources) if self.sources else "nothing")


def load(request: dict[str, Any]) -> Loaded:
    """Run `request` (see `_answer`) in loader processes until one answers; each module that kills or hangs a
    loader is a load error, and the next loader skips it."""
    from .registry import DEFAULT_IMPORT_TIMEOUT_S, LoadError

    broken: dict[str, str] = {}
    while True:
        outcome = _one_loader({**request, "skip": sorted(broken)}, DEFAULT_IMPORT_TIMEOUT_S + IMPORT_GRACE_S)
        if isinstance(outcome, dict):
            try:
                loaded = _loaded_from(outcome)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise LoaderFailed(f"the case loader's answer is malformed ({type(exc).__name__}: {exc})") from None
            loaded.errors[:0] = [LoadError(name, why) for name, why in broken.items()]
            loaded.broken_modules = sorted(broken)
            return loaded
        module, why = outcome
        if module is None or module in broken:
            raise LoaderFailed(why if module is None else f"{module}: {why}")
        broken[module] = why


def _loaded_from(answer: dict[str, Any]) -> Loaded:
    from .registry import LoadError

    def errors(pairs: list) -> list:
        return [LoadError(source, message) for source, message in pairs]

    return Loaded(chosen=[undescribe(d) for d in answer.get("chosen", [])], errors=errors(answer.get("errors", [])),
                  sources=answer.get("sources", []), case_count=answer.get("case_count", 0),
                  usage=answer.get("usage"),
                  by_module={m: ([undescribe(d) for d in cases], errors(errs))
                             for m, (cases, errs) in answer.get("by_module", {}).items()},
                  skipped=None if answer.get("skipped") is None else [tuple(p) for p in answer["skipped"]],
                  skipped_error=answer.get("skipped_error"))


def _one_loader(request: dict[str, Any], import_deadline_s: float) -> dict[str, Any] | tuple[str | None, str]:
    """One loader process: its answer, or (the module it was importing, why it gave no answer)."""
    read_end, write_end = os.pipe()
    log = tempfile.TemporaryFile(mode="w+", prefix="harness-loader-")
    process = subprocess.Popen([sys.executable, "-m", "harness.case_loader"], stdin=subprocess.PIPE, stdout=log,
                               stderr=subprocess.STDOUT, pass_fds=(write_end,), start_new_session=True,
                               env=dict(os.environ, HARNESS_LOADER_FD=str(write_end),
                                        HARNESS_PARENT_PID=str(os.getpid())))
    os.close(write_end)
    token = new_token()
    receiver = Receiver(token)
    current: str | None = None  # the module being imported; None before the first and while selecting
    selector = selectors.DefaultSelector()
    results = os.fdopen(read_end, "rb", buffering=0)
    selector.register(results, selectors.EVENT_READ)
    try:
        process.stdin.write(f"{token}\n{json.dumps(request)}\n".encode())
        process.stdin.close()
        deadline = time.monotonic() + import_deadline_s  # torch's import, then each module's
        while True:
            if not selector.select(1.0):
                if time.monotonic() > deadline:
                    if current is None:
                        return None, "the case loader gave no answer in time"
                    return current, f"importing it took more than {import_deadline_s - IMPORT_GRACE_S:g}s"
                continue
            chunk = os.read(results.fileno(), 1 << 20)
            if not chunk:
                process.wait()
                why = _death(process.returncode, _tail(log))
                return current, why if current else why.replace("the process importing it", "the case loader", 1)
            for message in receiver.feed(chunk):
                if "importing" in message:
                    current, deadline = str(message["importing"]), time.monotonic() + import_deadline_s
                elif "selecting" in message:
                    current, deadline = None, time.monotonic() + SELECTION_DEADLINE_S
                elif "answer" in message:
                    return message["answer"]
    except ChannelCorrupted as exc:
        return current, f"it wrote to the harness's channel ({exc})"
    except (BrokenPipeError, OSError) as exc:
        return current, f"the loader process went away ({exc})"
    finally:
        selector.close()
        results.close()
        process_tree.kill_tree(process.pid)
        process.wait()
        log.close()


def _tail(log: Any) -> str:
    log.flush()
    log.seek(0)
    text = log.read()[-LOG_TAIL_CHARS:].strip()
    return text.splitlines()[-1] if text else ""


def _death(code: int | None, tail: str) -> str:
    import signal

    if code is not None and code < 0:
        try:
            what = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            what = f"was killed by signal {-code}"
    else:
        what = f"exited with code {code}"
    return f"the process importing it {what}" + (f" (its last output: {tail})" if tail else "")


# The loader process.

def _answer(request: dict[str, Any], importing: Callable[[str], None], selecting: Callable[[], None]) -> dict[str, Any]:
    """What the request asks for. `kind`: "select" (the CLI: a selection over every case path), "pytest" (each
    module's cases, as pytest collects them), "skipped" (what the selected case sources leave out)."""
    from .registry import load_registry

    kind = request["kind"]
    if kind == "pytest":
        from .sources import load_for_pytest

        by_module = {}
        for module in request["modules"]:
            registry = load_for_pytest(module, request.get("keyword"), request.get("include_full", False),
                                       skip=request["skip"], on_import=importing)
            by_module[module] = ([describe(c) for c in registry.cases.values()],
                                 [[e.source, e.message] for e in registry.errors])
        return {"by_module": by_module}
    registry = load_registry(request["paths"], include_default=request.get("include_default", True),
                             skip=request["skip"], on_import=importing)
    selecting()  # case sources generate their cases now: no module is being imported
    answer: dict[str, Any] = {"sources": registry.sources}
    if kind == "skipped":
        from .sources import skipped_by_sources

        answer["skipped"], answer["skipped_error"] = skipped_by_sources(registry, request)
    else:
        try:
            chosen = registry.select(request["names"], request.get("keyword"), request.get("tags", ()),
                                     include_full=request.get("include_full", False))
            answer["chosen"] = [describe(c) for c in chosen]
        except KeyError as exc:
            answer["usage"] = exc.args[0]
        except Exception as exc:  # noqa: BLE001 - a malformed -k expression
            answer["usage"] = f"bad selection: {exc}"
    answer["errors"] = [[e.source, e.message] for e in registry.errors]
    answer["case_count"] = len(registry.cases)
    return answer


def main() -> int:
    import signal

    process_tree.signal_on_parent_death(signal.SIGKILL)
    process_tree.become_subreaper()
    tasks, result_stream = take_private("HARNESS_LOADER_FD")
    sender = Sender(result_stream, tasks.readline().strip())
    request = json.loads(tasks.readline())
    answer = _answer(request, lambda name: sender.send({"importing": name}), lambda: sender.send({"selecting": True}))
    sender.send({"answer": answer})
    os._exit(0)  # no atexit hook or thread a case module left may run, or keep the harness waiting


if __name__ == "__main__":
    sys.exit(main())
