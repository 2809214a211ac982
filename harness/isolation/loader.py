"""Case modules are imported in child processes: the harness's own process never runs a line of case code.

A case module is arbitrary Python: at import it may exit (`os._exit(0)`,
which would end a run with exit 0 and no record: a silent pass), crash
(a segfault), patch torch or the harness, or print. The CLI and the pytest
plugin therefore ask a loader process (`python -m harness.isolation.loader`) for
the cases. The loader imports torch and the harness and then imports each
module in a process forked from it (`_in_module_process`), so no module's
import meets another's: one cannot drop, rename or answer for another
module's cases. Each module's process sends back its cases as plain
descriptions (`describe`); the loader checks that each reads back and names
its own module as its source (what does not is a load error of that module
alone), and the harness makes the selection itself from the descriptions.
Case sources (OpInfo) generate the cases a selection can match in their
module's process too. The harness rebuilds `Case` objects from the
descriptions; their `build` only says where it runs (`BuiltInCaseProcess`),
because a case is built in the process that runs it, which imports the
module itself.

The loader speaks on the framed channel (`harness.isolation.channel`), naming each
module before it imports it. A module whose process dies, hangs past the
import deadline or answers what is no answer is a load error naming it. If
the loader itself dies or hangs, the module it was importing becomes a load
error, and a fresh loader goes on without that module. A worker never
imports a module found broken so (`broken_modules`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import selectors
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.isolation import process_tree
from harness.isolation import child as child_process
from harness.isolation.channel import ChannelCorrupted, Sender, closer, private_copy, take_private
from harness.isolation.child import IMPORT_GRACE_S

# What the selection may take once every module is imported (a case source generating its cases: OpInfo's
# full sweep, cold, takes about half a minute).
SELECTION_DEADLINE_S = 1800.0


class LoaderFailed(Exception):
    """The loader process could not run at all (torch does not import): a setup error, not a case's."""


@dataclass(frozen=True)
class BuiltInCaseProcess:
    """The `build` of a case described by the loader: only a process that imports the case's module builds it."""

    name: str

    def __call__(self, dtype: Any) -> Any:
        raise RuntimeError(f"case {self.name!r} is built in a worker process, which imports its module")


# The case fields a description carries as they are (strings, numbers, bools, None, lists of strings).
_PLAIN_FIELDS = (
    "name",
    "tags",
    "modes",
    "dynamic",
    "issue",
    "size",
    "reference",
    "cosine_fallback",
    "strict_eager",
    "compiles",
    "generated",
    "culprit",
    "requires",
    "description",
    "source",
)


def _json_value(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)  # shown in listings only: the worker compiles with the module's own objects


def describe(case: Any) -> dict[str, Any]:
    """A case as plain JSON (no code): enough for the harness to select, list, name and record its runs."""
    from harness.layout import dtype_name

    description = {name: _json_value(getattr(case, name)) for name in _PLAIN_FIELDS}
    description["dtypes"] = [dtype_name(d) for d in case.dtypes]
    description["tolerances"] = {dtype_name(d): [t.rtol, t.atol] for d, t in case.tolerances.items()}
    description["compile_options"] = {str(k): _json_value(v) for k, v in case.compile_options.items()}
    description["known_failures"] = [dataclasses.asdict(k) for k in case.known_failures]
    return description


def undescribe(description: dict[str, Any]) -> Any:
    """The `Case` a description stands for, with a `build` that runs only in a worker."""
    from harness.layout import dtype_named
    from harness.registry import Case, KnownFailure
    from harness.judge.tolerances import Tolerance

    plain = {name: description[name] for name in _PLAIN_FIELDS}
    for name in ("tags", "modes", "requires"):
        plain[name] = tuple(plain[name])
    return Case(
        build=BuiltInCaseProcess(plain["name"]),
        **plain,
        dtypes=tuple(dtype_named(d) for d in description["dtypes"]),
        tolerances={dtype_named(d): Tolerance(*t) for d, t in description["tolerances"].items()},
        compile_options=dict(description["compile_options"]),
        known_failures=tuple(KnownFailure(**k) for k in description["known_failures"]),
    )


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
    from harness.registry import DEFAULT_IMPORT_TIMEOUT_S, LoadError

    broken: dict[str, str] = {}
    while True:
        outcome = _one_loader({**request, "skip": sorted(broken)}, DEFAULT_IMPORT_TIMEOUT_S + IMPORT_GRACE_S)
        if isinstance(outcome, dict):
            try:
                loaded = _loaded_from(outcome, request)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise LoaderFailed(f"the case loader's answer is malformed ({type(exc).__name__}: {exc})") from None
            loaded.errors[:0] = [LoadError(name, why) for name, why in broken.items()]
            loaded.broken_modules = sorted(broken)
            return loaded
        module, why = outcome
        if module is None or module in broken:
            raise LoaderFailed(why if module is None else f"{module}: {why}")
        broken[module] = why


def _loaded_from(answer: dict[str, Any], request: dict[str, Any]) -> Loaded:
    """The loader's answer read back; for a selection, the selection made here from the cases it described."""
    from harness.registry import LoadError

    def errors(pairs: list) -> list:
        return [LoadError(str(source), str(message)) for source, message in pairs]

    loaded = Loaded(
        errors=errors(answer.get("errors", [])),
        sources=answer.get("sources", []),
        by_module={
            m: ([undescribe(d) for d in cases], errors(errs))
            for m, (cases, errs) in answer.get("by_module", {}).items()
        },
        skipped=None if answer.get("skipped") is None else [tuple(p) for p in answer["skipped"]],
        skipped_error=answer.get("skipped_error"),
        case_count=answer.get("case_count", 0),
    )
    if request["kind"] == "select":
        _select_from(loaded, [undescribe(d) for d in answer["cases"]], request)
    return loaded


def _select_from(loaded: Loaded, cases: list[Any], request: dict[str, Any]) -> None:
    """The selection, made by the harness from the described cases (the modules' processes made none of it)."""
    from harness.registry import Registry

    registry = Registry()
    for case in cases:
        registry.add(case, case.source)
    loaded.errors += registry.errors  # a name two modules define
    loaded.case_count = len(registry.cases)
    try:
        loaded.chosen = registry.select(
            request["names"],
            request.get("keyword"),
            request.get("tags", ()),
            include_full=request.get("include_full", False),
            dynamic=bool(request.get("dynamic")),
        )
    except KeyError as exc:
        loaded.usage = exc.args[0]
    except Exception as exc:  # noqa: BLE001 - a malformed -k expression
        loaded.usage = f"bad selection: {exc}"


def _one_loader(request: dict[str, Any], import_deadline_s: float) -> dict[str, Any] | tuple[str | None, str]:
    """One loader process: its answer, or (the module it was importing, why it gave no answer)."""
    log = tempfile.TemporaryFile(mode="w+", prefix="harness-loader-")
    child = child_process.start("harness.isolation.loader", log)
    process, receiver, results = child.process, child.receiver, child.results
    current: str | None = None  # the module being imported; None before the first and while selecting
    selector = selectors.DefaultSelector()
    selector.register(results, selectors.EVENT_READ)
    try:
        process.stdin.write(f"{json.dumps(request)}\n".encode())
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
    text = child_process.read_tail(log.buffer if hasattr(log, "buffer") else log).strip()
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


# The loader process: it imports torch and the harness, and each case module in a process forked from it, so
# that no module's import meets another's (a module cannot drop, rename or answer for another module's cases).


@dataclass(frozen=True)
class _SourceSketch:
    """A case source as a module process declared it: enough for `source_selection.wanted`."""

    name: str
    prefix: str
    tags: tuple[str, ...]
    module: str


def _answer(
    request: dict[str, Any],
    importing: Callable[[str], None],
    selecting: Callable[[], None],
    forget: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """What the request asks for. `kind`: "select" (the CLI: every case of every case path, for the harness to
    select from), "pytest" (each module's cases, as pytest collects them), "skipped" (what the selected case
    sources leave out). `forget` closes the loader's channel in a module's process."""
    from harness.registry import CASE_SOURCE_ORIGIN, Registry, _module_loaders, module_key

    kind = request["kind"]
    if kind == "pytest":
        by_module = {}
        for module in request["modules"]:
            if module_key(module) in {module_key(m) for m in request["skip"]}:
                continue
            importing(module)
            answer = _accepted(
                _in_module_process(module, forget, lambda module=module: _pytest_module(module, request)), module
            )
            by_module[module] = (answer["cases"], answer["errors"])
        return {"by_module": by_module}
    if kind == "skipped":
        from harness.registry import load_registry
        from harness.registry.sources import skipped_by_sources

        registry = load_registry(
            request["paths"],
            include_default=request.get("include_default", True),
            skip=request["skip"],
            on_import=importing,
        )
        selecting()
        skipped, error = skipped_by_sources(registry, request)
        return {
            "sources": registry.sources,
            "skipped": skipped,
            "skipped_error": error,
            "errors": [[e.source, e.message] for e in registry.errors],
            "case_count": len(registry.cases),
        }

    from harness.registry import DEFAULT_CASE_DIR
    from harness.registry.selection import wanted

    listing = Registry()  # the modules to import, and the paths that name none
    paths = [str(DEFAULT_CASE_DIR)] if request.get("include_default", True) and DEFAULT_CASE_DIR.is_dir() else []
    skipped = {module_key(m) for m in request["skip"]}
    modules = [
        name
        for path in paths + list(request["paths"])
        for name, _ in _module_loaders(path, listing)
        if module_key(name) not in skipped
    ]
    cases: list[dict[str, Any]] = []
    errors = [[e.source, e.message] for e in listing.errors]
    sketches: list[_SourceSketch] = []
    for module in modules:
        importing(module)
        answer = _accepted(_in_module_process(module, forget, lambda module=module: _module_cases(module)), module)
        cases += answer["cases"]
        errors += answer["errors"]
        sketches += [_SourceSketch(d["name"], d["prefix"], tuple(d["tags"]), module) for d in answer["sources"]]
    selecting()  # case sources generate their cases now, each in its module's process
    known_tags = {t for d in cases for t in d["tags"]}
    names = list(request["names"])

    def asked(sketch: _SourceSketch) -> bool:
        try:
            return wanted(
                sketch, request.get("keyword"), request.get("tags", ()), request.get("include_full", False), known_tags
            )
        except Exception:  # noqa: BLE001 - a malformed -k: the harness's selection says so in one line
            return False

    for sketch in sketches:
        named = [n for n in names if n.startswith(sketch.prefix) and n not in {d["name"] for d in cases}]
        if named or (not names and asked(sketch)):
            answer = _accepted(
                _in_module_process(
                    sketch.module,
                    forget,
                    lambda sketch=sketch, named=named: _generated_cases(
                        sketch, named, not names, request.get("include_full", False)
                    ),
                    SELECTION_DEADLINE_S,
                ),
                sketch.module,
                generated=CASE_SOURCE_ORIGIN + sketch.name,
            )
            cases += answer["cases"]
            errors += answer["errors"]
    return {"sources": modules, "cases": cases, "errors": errors}


def _module_cases(module: str) -> dict[str, Any]:
    """In a module's process: its cases and the case sources it declares."""
    from harness.registry import DEFAULT_IMPORT_TIMEOUT_S, load_registry

    registry = load_registry([module], include_default=False, import_timeout_s=DEFAULT_IMPORT_TIMEOUT_S)
    return {
        **_described(registry),
        "sources": [{"name": s.name, "prefix": s.prefix, "tags": list(s.tags)} for s in registry.case_sources],
    }


def _generated_cases(sketch: _SourceSketch, named: list[str], generate: bool, include_full: bool) -> dict[str, Any]:
    """In a module's process: the cases its source `sketch` makes that the selection can match."""
    from harness.registry import CASE_SOURCE_ORIGIN, DEFAULT_IMPORT_TIMEOUT_S, Registry, load_registry

    registry = load_registry([sketch.module], include_default=False, import_timeout_s=DEFAULT_IMPORT_TIMEOUT_S)
    generated = Registry(errors=registry.errors)
    for source in registry.case_sources:
        if source.name != sketch.name:
            continue
        if generate:
            registry.load_source(source, include_full)
        for name in named:
            registry.lookup(name)
        origin = CASE_SOURCE_ORIGIN + source.name
        for case in registry.cases.values():
            if case.source == origin:
                generated.cases[case.name] = case
    return _described(generated)


def _pytest_module(module: str, request: dict[str, Any]) -> dict[str, Any]:
    from harness.registry.sources import load_for_pytest

    return _described(load_for_pytest(module, request.get("keyword"), request.get("include_full", False)))


def _described(registry: Any) -> dict[str, Any]:
    """In a module's process: its registry's cases as descriptions, and its load errors."""
    cases, errors = [], [[e.source, e.message] for e in registry.errors]
    for case in registry.cases.values():
        try:
            cases.append(describe(case))
        except Exception as exc:  # noqa: BLE001 - metadata that cannot be described: this case's module's error
            errors.append(
                [
                    str(getattr(case, "source", "")),
                    f"case {str(getattr(case, 'name', ''))[:80]!r} cannot be described ({type(exc).__name__})",
                ]
            )
    return {"cases": cases, "errors": errors}


def _accepted(answer: dict[str, Any], module: str, generated: str | None = None) -> dict[str, Any]:
    """A module process's answer, checked here (where no case code runs): each case must read back and come from
    `module` (or, for a case source's, from `generated`); what does not is a load error of this module alone."""
    from harness.registry import CASE_SOURCE_ORIGIN, module_key

    cases, errors = [], []
    for pair in answer.get("errors", []):
        if isinstance(pair, list) and len(pair) == 2:
            errors.append([str(pair[0])[:500], str(pair[1])[:2000]])
    for description in answer.get("cases", []):
        try:
            case = undescribe(description)
        except Exception as exc:  # noqa: BLE001 - whatever is wrong with it, it is no description of a case
            errors.append([module, f"a case description that does not read back ({type(exc).__name__}): left out"])
            continue
        source = str(case.source)
        ours = (
            (source == generated)
            if generated
            else (module_key(source) == module_key(module) or source.startswith(CASE_SOURCE_ORIGIN))
        )
        if not ours:
            errors.append(
                [module, f"case {case.name[:80]!r} names another module as its source ({source[:200]!r}): left out"]
            )
            continue
        cases.append(description)
    sources = [
        d
        for d in answer.get("sources", [])
        if isinstance(d, dict)
        and isinstance(d.get("name"), str)
        and isinstance(d.get("prefix"), str)
        and isinstance(d.get("tags"), list)
    ]
    return {"cases": cases, "errors": errors, "sources": sources}


def _in_module_process(
    module: str, forget: Callable[[], None], work: Callable[[], dict[str, Any]], deadline_s: float | None = None
) -> dict[str, Any]:
    """`work()` in a process forked from this one: its answer, or the module's load error if the process died,
    hung or wrote what is no answer."""
    from harness.registry import DEFAULT_IMPORT_TIMEOUT_S

    deadline_s = deadline_s or DEFAULT_IMPORT_TIMEOUT_S + IMPORT_GRACE_S / 2  # before the harness's own
    read_end, write_end = os.pipe()
    log = tempfile.TemporaryFile(mode="w+", prefix="harness-loader-module-")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the module's process: never returns
        code = 0
        try:
            os.close(read_end)
            forget()
            process_tree.signal_on_parent_death(signal.SIGKILL)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            out = os.fdopen(private_copy(write_end), "wb")
            os.close(write_end)
            data = json.dumps(work()).encode()
            out.write(data)
            out.flush()
        except BaseException as exc:  # noqa: BLE001 - this process must never go on as the loader
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
            code = 70
        os._exit(code)
    os.close(write_end)
    chunks: list[bytes] = []
    started = time.monotonic()
    why = None
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], 1.0)
            if ready:
                chunk = os.read(read_end, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            elif time.monotonic() - started > deadline_s:
                why = f"importing it took more than {deadline_s - IMPORT_GRACE_S / 2:g}s"
                break
    finally:
        os.close(read_end)
        process_tree.kill_tree(pid)
        _, status = os.waitpid(pid, 0)
        process_tree.kill_descendants(os.getpid())
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    if why is None:
        try:
            answer = json.loads(b"".join(chunks)) if code == 0 and chunks else None
            if answer is not None and not (
                isinstance(answer.get("cases"), list) and isinstance(answer.get("errors"), list)
            ):
                answer = None
        except (ValueError, RecursionError, AttributeError):
            answer = None
        if answer is not None:
            return answer
        why = (
            _death(code, _tail(log))
            if code != 0 or not chunks
            else "it wrote to the loader's channel what is no answer"
        )
    log.close()
    return {"cases": [], "errors": [[module, why]], "sources": []}


def main() -> int:
    process_tree.signal_on_parent_death(signal.SIGKILL)
    process_tree.become_subreaper()
    tasks, result_stream = take_private(child_process.RESULT_FD_VARIABLE)
    sender = Sender(result_stream, tasks.readline().strip())
    request = json.loads(tasks.readline())
    import torch  # noqa: F401 - imported once here, by every module's process through the fork

    from harness import registry  # noqa: F401

    answer = _answer(
        request,
        lambda name: sender.send({"importing": name}),
        lambda: sender.send({"selecting": True}),
        closer(tasks, result_stream),
    )
    sender.send({"answer": answer})
    os._exit(0)  # no atexit hook or thread a case module left may run, or keep the harness waiting


if __name__ == "__main__":
    sys.exit(main())
