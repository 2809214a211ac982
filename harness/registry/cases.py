"""Cases and where they come from.

A case module is any Python file that defines `Case` objects at module level
(directly, through the `@case` decorator, or in a list named `CASES`). The
registry loads the project's `cases/` directory and any directory, file or
dotted module a user names, so teams can keep private cases next to ours.

A module may also declare `CASE_SOURCES`: generators of many cases (OpInfo's
thousands) that cost seconds to load. The registry records them and loads one
only when a selection asks for it (`CaseSource`, `harness/registry/selection.py`).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import os
import signal
import sys
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

import torch

from harness.layout import dtype_name
from harness.records import exception_line
from harness.registry.shipped import SHIPPED_CASE_DIR
from harness.registry.selection import wanted
from harness.judge.known_failures import KnownFailure, torch_version_matches  # noqa: F401 - case authors' names
from harness.judge.tolerances import Tolerance

MODES = ("inference", "training", "train_step")
SIZES = ("ci", "full")
REFERENCES = ("auto", "fp64", "none")


DEFAULT_CASE_DIR = SHIPPED_CASE_DIR
# Seconds one case module may take to import before it counts as hanging.
DEFAULT_IMPORT_TIMEOUT_S = 120.0


@dataclass
class Program:
    """What a case builds: the callable under test and its inputs.

    `fn` is a function or an `nn.Module` (whose parameter gradients are compared
    in training; `train_step` needs a module). `inputs` (positional) and
    `kwargs` hold `TensorSpec`s, tensors or plain values.
    """

    fn: Callable[..., Any]
    inputs: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


# The default timeouts (`Case.default_timeout_s`; `--timeout` / `--harness-timeout` override them).
SMALL_TIMEOUT_S = 300.0
MODEL_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[torch.dtype], Program | tuple]
    tags: tuple[str, ...] = ()
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    modes: tuple[str, ...] = ("inference",)
    tolerances: Mapping[torch.dtype, Tolerance] = field(default_factory=dict)
    compile_options: Mapping[str, Any] = field(default_factory=dict)
    dynamic: bool | None = False
    # A dynamic run (`--dynamic`, harness/run/dynamic.py): the input dims that vary, by input position or
    # keyword (None: the leading dim of every input of rank 2 or more); `always_dynamic` runs the case so
    # without being asked (the OpInfo sweep's dynamic axis).
    dynamic_dims: Mapping[int | str, tuple[int, ...]] | None = None
    always_dynamic: bool = False
    issue: str | None = None
    known_failures: tuple[KnownFailure, ...] = ()
    # "full": the real shapes (GPU/NPU nightly); "ci": a variant two CPU cores afford.
    size: str = "ci"
    # "auto": a float64 reference is computed only when a floating output misses
    # its tolerance; "fp64": always; "none": never (verdicts by tolerance alone).
    reference: str = "auto"
    # torchbench's last resort: a float output failing tolerance and the RMSE
    # rule still passes with cosine similarity >= 0.99 (off unless asked for).
    cosine_fallback: bool = False
    # Eager's dtype semantics are the contract: a result closer to float64 than eager is no excuse.
    strict_eager: bool = False
    # Whether Dynamo must produce a graph: a compiled run that compiled nothing is an error, not a pass.
    compiles: bool = True
    # Generated cases (OpInfo samples): what is no test of the compiler is a skip with its reason, not an
    # error: an input eager rejects (an exception in the eager run), or a program of which Dynamo compiles
    # nothing (every frame breaks, e.g. on a data-dependent op).
    generated: bool = False
    # Where the bug is known to be, for judging localization: an ATen op pattern the blamed kernel
    # computes ("aten.mul", alternatives with "|"), "stage:<stage>" (dynamo, aot_eager, ...), or "pass:<name>" (the
    # Inductor graph pass named: "pass:reinplace_inplaceable_ops").
    culprit: str | None = None
    requires: tuple[str, ...] = ()
    description: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError(f"case {self.name!r}: its name must be text")
        # Sequences given as lists are kept as tuples (a case is immutable); text is no sequence of tags.
        for name in ("tags", "modes", "dtypes", "requires"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        problems = []
        if not self.name.isidentifier() and not all(part.isidentifier() for part in self.name.split("-")):
            problems.append(f"name {self.name!r} is not made of identifier characters")
        elif not self.name.isascii():  # (a Cyrillic і, a fullwidth letter or a combining accent prints as another)
            shown = self.name.encode("ascii", "backslashreplace").decode()
            problems.append(f"name {shown} is not ASCII: it could print as another case's name")
        for name in ("tags", "modes", "requires"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
                problems.append(f"{name} must be a tuple of text, not {value!r}"[:200])
        if not isinstance(self.description, str):
            problems.append("description must be text")
        if problems:  # the checks below read these fields
            raise ValueError(f"case {self.name!r}: " + "; ".join(problems))
        if bad := [m for m in self.modes if m not in MODES]:
            problems.append(f"modes {bad} not in {MODES}")
        if self.size not in SIZES:
            problems.append(f"size {self.size!r} not in {SIZES}")
        if self.reference not in REFERENCES:
            problems.append(f"reference {self.reference!r} not in {REFERENCES}")
        if not self.dtypes or not all(isinstance(d, torch.dtype) for d in self.dtypes):
            problems.append("dtypes must be a non-empty tuple of torch dtypes")
        if not callable(self.build):
            problems.append("build is not callable")
        if problems:
            raise ValueError(f"case {self.name!r}: " + "; ".join(problems))

    @property
    def keywords(self) -> tuple[str, ...]:
        return (self.name, *self.tags, self.size)

    @property
    def default_timeout_s(self) -> float:
        """How long one run may take when `--timeout` does not say: minutes for a model (a Longformer training
        step compiles for two and a half minutes on a loaded two-core machine) or a full-size case, less for a
        small program, so that one that hangs is named in minutes, not half an hour."""
        return MODEL_TIMEOUT_S if (self.size == "full" or "model" in self.tags) else SMALL_TIMEOUT_S

    def run_keywords(self, dtype: torch.dtype, mode: str, dynamic: bool = False) -> tuple[str, ...]:
        """What `-k` matches for one run: the case's keywords, the dtype, the mode, and "dynamic" for a dynamic
        run (the words of a pytest id, `case[dtype-mode-dynamic]`, and its tags and size)."""
        dynamic = dynamic or self.always_dynamic
        return (*self.keywords, dtype_name(dtype), mode, *(("dynamic",) if dynamic else ()))

    def known_failure(self, surrogate: bool = False, **run: str | None) -> KnownFailure | None:
        return next((k for k in self.known_failures if k.matches(surrogate, **run)), None)


def case(**metadata: Any) -> Callable[[Callable[[torch.dtype], Any]], Case]:
    """Decorator: `@case(tags=..., dtypes=...)` over a build function named as the case."""

    def wrap(build: Callable[[torch.dtype], Any]) -> Case:
        return Case(
            name=metadata.pop("name", build.__name__),
            build=build,
            description=metadata.pop("description", (build.__doc__ or "").strip()),
            **metadata,
        )

    return wrap


@dataclass(frozen=True)
class LoadError:
    source: str
    message: str

    def __str__(self) -> str:
        return f"cannot load cases from {self.source}: {self.message}"


# The `source` of a generated case: "case source <name>" (not a module a worker could import).
CASE_SOURCE_ORIGIN = "case source "


@dataclass(frozen=True)
class CaseSource:
    """Cases made on demand by a generator too costly to run on every load (OpInfo).

    Declared in a case module's `CASE_SOURCES`; `Registry.select` loads it only
    when the selection can match its cases (the rule is `source_selection.wanted`):
    a case name with its `prefix`, a `--tag` among its `tags` (or one no loaded
    case carries), a `-k` expression that names it, or `--full` alone.
    """

    name: str  # what a -k expression mentions to ask for it ("opinfo")
    prefix: str  # every case name it makes starts with this
    tags: tuple[str, ...]  # tags that ask for it
    # include_full -> its cases, in a stable order ("ci"-size cases only without include_full).
    generate: Callable[[bool], Iterable[Case]]
    # One case by name without generating the others (spawned workers look cases up by name), or None.
    lookup: Callable[[str], Case | None]
    # Why it cannot load here (a missing package, with the install command), or None.
    unavailable: Callable[[], str | None] = lambda: None
    # What it leaves out and why: (what, reason) pairs, for `harness list --skipped`.
    skipped: Callable[[], Iterable[tuple[str, str]]] = lambda: ()
    description: str = ""
    # Loads what building its cases needs (OpInfo: op_db). A worker calls it before its first case of the
    # source starts, so that the load is outside every case's clock and timeout.
    prepare: Callable[[], None] = lambda: None


class _Cases(dict):
    """Case name -> Case; a name no loaded case has is looked up in the case sources whose prefix it has."""

    def __init__(self, registry: "Registry"):
        super().__init__()
        self._registry = registry

    def __missing__(self, name: str) -> Case:
        found = self._registry.lookup(name)
        if found is None:
            raise KeyError(name)
        return found


@dataclass
class Registry:
    cases: dict[str, Case] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    case_sources: list[CaseSource] = field(default_factory=list)
    # Source name -> whether its full-size cases are loaded too.
    loaded_sources: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cases, self.cases = self.cases, _Cases(self)
        self.cases.update(cases)

    def known_tags(self) -> set[str]:
        """The tags of the cases loaded so far."""
        return {t for c in self.cases.values() for t in c.tags}

    def describe_sources(self) -> str:
        return "searched: " + (", ".join(self.sources) if self.sources else "nothing")

    def add(self, item: Case, source: str) -> None:
        if item.name in self.cases:
            self.errors.append(
                LoadError(source, f"case {item.name!r} is already defined in {self.cases[item.name].source}")
            )
            return
        self.cases[item.name] = item if item.source else _with_source(item, source)

    def _available(self, source: CaseSource) -> bool:
        reason = source.unavailable()
        if reason is not None:
            error = LoadError(CASE_SOURCE_ORIGIN + source.name, reason)
            if error not in self.errors:
                self.errors.append(error)
        return reason is None

    def load_source(self, source: CaseSource, include_full: bool = False) -> None:
        """Every case of `source` (full-size ones too with `include_full`) into `cases`, once."""
        if self.loaded_sources.get(source.name) in (True, include_full) or not self._available(source):
            return
        try:
            origin = CASE_SOURCE_ORIGIN + source.name
            for item in source.generate(include_full):
                if dict.__contains__(self.cases, item.name) and self.cases[item.name].source == origin:
                    continue  # looked up by name, or loaded at ci size, before
                self.add(item, origin)
        except Exception as exc:  # a broken generator must not hide the other cases
            self.errors.append(
                LoadError(CASE_SOURCE_ORIGIN + source.name, f"{type(exc).__name__}: {exception_line(exc)}")
            )
            return
        self.loaded_sources[source.name] = include_full

    def prepare(self, case: Case) -> None:
        """Load what building a generated case needs (its source's `prepare`); nothing for other cases. A load
        that fails is left to the case's build, which fails the same way inside the run and is recorded."""
        for source in self.case_sources:
            if case.source == CASE_SOURCE_ORIGIN + source.name:
                try:
                    source.prepare()
                except Exception:  # noqa: BLE001 - the build raises it again, in the run's record
                    pass

    def lookup(self, name: str) -> Case | None:
        """A case by name, looked up in the case source whose prefix it has (nothing else is generated)."""
        if dict.__contains__(self.cases, name):
            return dict.__getitem__(self.cases, name)
        for source in self.case_sources:
            if name.startswith(source.prefix) and self._available(source):
                try:
                    found = source.lookup(name)
                except Exception as exc:
                    self.errors.append(
                        LoadError(CASE_SOURCE_ORIGIN + source.name, f"{type(exc).__name__}: {exception_line(exc)}")
                    )
                    return None
                if found is not None:
                    found = found if found.source else _with_source(found, CASE_SOURCE_ORIGIN + source.name)
                    dict.__setitem__(self.cases, name, found)
                    return found
        return None

    def select(
        self,
        names: Sequence[str] = (),
        keyword: str | None = None,
        tags: Sequence[str] = (),
        include_full: bool = False,
        dynamic: bool = False,
    ) -> list[Case]:
        """Cases by exact name, then filtered by tag and -k expression (a case with any run it matches:
        `Case.run_keywords`, with `dynamic` for a dynamic run).

        Named cases are always taken whatever their size; otherwise `full`
        cases need `include_full`. Case sources the selection can match are
        loaded first (`source_selection.wanted`).
        """
        known_tags = self.known_tags() if tags else ()
        for source in self.case_sources:
            if not names and wanted(source, keyword, tags, include_full, known_tags):
                self.load_source(source, include_full)
        unknown = [n for n in names if self.lookup(n) is None]
        if unknown:
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, self.cases, 3)
                hints.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
            raise KeyError("unknown case " + "; ".join(hints) + "; `harness list` shows all")
        chosen = (
            [self.cases[n] for n in names]
            if names
            else [c for c in self.cases.values() if include_full or c.size != "full"]
        )
        if tags:
            chosen = [c for c in chosen if set(tags) & set(c.tags)]
        if keyword:
            matcher = keyword_matcher(keyword)
            chosen = [
                c for c in chosen if any(matcher(c.run_keywords(d, m, dynamic)) for d in c.dtypes for m in c.modes)
            ]
        return chosen


def keyword_matcher(expression: str) -> Callable[[Iterable[str]], bool]:
    """pytest's `-k` grammar (and/or/not, parentheses, substring match)."""
    from _pytest.mark.expression import Expression  # pytest is a dependency; its grammar is the one users know

    compiled = Expression.compile(expression)

    def matches(words: Iterable[str]) -> bool:
        lowered = [w.lower() for w in words]
        return compiled.evaluate(lambda token, **_: any(token.lower() in w for w in lowered))

    return matches


def load_registry(
    paths: Sequence[str] = (),
    include_default: bool = True,
    import_timeout_s: float | None = DEFAULT_IMPORT_TIMEOUT_S,
    skip: Collection[str] = (),
    on_import: Callable[[str], None] | None = None,
) -> Registry:
    """Cases of the project's `cases/` and of `paths`. A module that fails to import, exits, is interrupted
    or hangs past `import_timeout_s` becomes a load error; the others still load. Modules named in `skip` are
    not imported; `on_import` hears each module's name before its import starts."""
    registry = Registry()
    default = [str(DEFAULT_CASE_DIR)] if include_default and DEFAULT_CASE_DIR.is_dir() else []
    sources = default + list(paths)
    skipped = {module_key(name) for name in skip}
    for source in sources:
        for name, loader in _module_loaders(source, registry):
            if module_key(name) in skipped:
                continue
            registry.sources.append(name)
            if on_import is not None:
                on_import(name)
            try:
                with _import_deadline(import_timeout_s, name):
                    module = loader()
                found = list(_cases_in(module))
                generators = list(getattr(module, "CASE_SOURCES", []))
            except BaseException as exc:  # sys.exit, Ctrl-C, a hang: a broken case module must not end the run
                registry.errors.append(LoadError(name, f"{type(exc).__name__}: {exception_line(exc)}"))
                continue
            for item in found:
                registry.add(item, name)
            for generator in generators:
                if any(s.name == generator.name for s in registry.case_sources):
                    registry.errors.append(LoadError(name, f"case source {generator.name!r} is already declared"))
                    continue
                registry.case_sources.append(generator)
    return registry


def module_key(name: str) -> str:
    """One spelling of a case module's name, whichever way its path was given."""
    return os.path.realpath(name) if name.endswith(".py") else name


def _module_loaders(source: str, registry: Registry) -> list[tuple[str, Callable[[], Any]]]:
    path = Path(source)
    if path.is_dir():
        # Subdirectories too (cases/upstream/...); a leading "_" or "." hides a file or directory.
        return [
            (str(p), _file_loader(p))
            for p in sorted(path.rglob("*.py"))
            if not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts)
        ]
    if path.suffix == ".py":
        if not path.is_file():
            registry.errors.append(LoadError(source, "no such file"))
            return []
        return [(str(path), _file_loader(path))]
    if path.exists():
        registry.errors.append(LoadError(source, "not a directory, a .py file or a dotted module name"))
        return []
    if os.sep in source or source.startswith("."):
        registry.errors.append(LoadError(source, "no such directory"))
        return []
    return [(source, lambda: importlib.import_module(source))]


class ImportTimeout(Exception):
    pass


@contextlib.contextmanager
def _import_deadline(seconds: float | None, name: str) -> Iterator[None]:
    """Interrupt an import that takes longer than `seconds` (POSIX, main thread; elsewhere no deadline)."""
    usable = seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise ImportTimeout(f"importing took more than {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _file_loader(path: Path) -> Callable[[], Any]:
    def load() -> Any:
        module_name = f"harness_case_module.{path.stem}_{zlib.crc32(str(path.resolve()).encode()):08x}"
        if module_name in sys.modules:
            return sys.modules[module_name]
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses and pickling look modules up here
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        return module

    return load


def _cases_in(module: Any) -> Iterable[Case]:
    seen: set[int] = set()
    candidates = list(vars(module).values()) + list(getattr(module, "CASES", []))
    for value in candidates:
        if isinstance(value, Case) and id(value) not in seen:
            seen.add(id(value))
            yield value


def _with_source(item: Case, source: str) -> Case:
    import dataclasses

    return dataclasses.replace(item, source=source)
