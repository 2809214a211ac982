"""pytest plugin: every case x dtype x mode in `cases/` (and --case-path) becomes a test.

A thin layer over the library: collection asks the loader process (`harness.isolation.loader`) for each case
module's cases, each test runs in a process forked from a worker (`harness.isolation.pool`) as the CLI's runs
do, the options are the CLI's table (`options.py`), and results go to the same JSON records the CLI writes
(merged across xdist workers). Ids are `case[dtype-mode]` (`-dynamic` added); `-k` also matches the tags and
the size through each item's keywords, as markers do.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness import records as R
from harness.records.run_config import RunConfig

RECORDS_KEY = pytest.StashKey[list]()
RUN_CONFIG_KEY = pytest.StashKey[Any]()
EXPECTATIONS_KEY = pytest.StashKey[Any]()  # harness.judge.known_failures.Expectations
RUNNER_KEY = pytest.StashKey[Any]()
CASE_ROOTS_KEY = pytest.StashKey[list]()
JOURNAL_KEY = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    from harness.frontends.options import PROCESS_OPTIONS, RUN_OPTIONS, SELECTION_OPTIONS, add_to_pytest

    group = parser.getgroup("harness", "torch.compile accuracy harness")
    add_to_pytest(group, RUN_OPTIONS + SELECTION_OPTIONS + PROCESS_OPTIONS)
    group.addoption("--harness-json", default=None, metavar="PATH", help="write the case results here")
    group.addoption("--harness-report", default=None, metavar="DIR", help="write results.json and index.html here")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full: a full-size case (real shapes, whole models): needs --harness-full")
    config.addinivalue_line("markers", "harness_case: a test generated from a harness case")
    config.stash[RECORDS_KEY] = []
    _CONTROLLER["config"] = config
    _collect_case_paths(config)
    # torch is imported (seconds) only where the harness is in play: a project that merely has the package
    # installed runs its own tests at their own speed.
    if _in_play(config):
        session_run_config(config)


def session_run_config(config: pytest.Config) -> RunConfig:
    """The session's run configuration, made and checked (device, compiler backend, torch) on first need."""
    if RUN_CONFIG_KEY not in config.stash:
        from harness import torch_import

        problem = torch_import.prepare(config.getoption("device"))  # before the options' checks import torch
        if problem is not None:
            raise pytest.UsageError(problem)
        config.stash[RUN_CONFIG_KEY] = _run_config(config)
        if not hasattr(config, "workerinput"):
            _check_device(config.stash[RUN_CONFIG_KEY])
            _check_torch_version(config)
    return config.stash[RUN_CONFIG_KEY]


# Options besides the run and selection options whose being given puts the harness in play.
_PLUGIN_OPTIONS = ("harness_json", "harness_report", "harness_timeout", "harness_no_isolation")


def _in_play(config: pytest.Config) -> bool:
    """Whether this session uses the harness: a harness option given, or case modules among what it collects."""
    from harness.frontends.options import RUN_OPTIONS, SELECTION_OPTIONS

    for option in RUN_OPTIONS + SELECTION_OPTIONS:
        if option.pytest and config.getoption(option.dest_in_pytest) not in (None, False, [], option.default):
            return True
    if any(config.getoption(name) not in (None, False) for name in _PLUGIN_OPTIONS):
        return True
    asked = [Path(arg.split("::")[0]).resolve() for arg in config.args] or [Path.cwd()]
    # A directory above a case root is collected, unless the root lies in a virtual environment (an installed
    # package's cases, in a project's .venv): pytest does not collect there.
    environment = Path(sys.prefix).resolve()
    return any(
        root == a or root in a.parents or (a in root.parents and environment not in root.parents)
        for root in _case_roots(config)
        for a in asked
    )


def _check_torch_version(config: pytest.Config) -> None:
    from harness.inductor_compat import torch_version_problem

    problem = torch_version_problem()
    if problem is not None:
        fatal, message = problem
        if fatal:
            raise pytest.UsageError(message)
        config.issue_config_time_warning(pytest.PytestConfigWarning(message), stacklevel=2)


def _check_device(run_config: RunConfig) -> None:
    """A device asked for and absent fails the session, as in the CLI: a misconfigured GPU/NPU runner must not
    go green with every case skipped. So does a compiler backend that does not load as asked (loaded here, in
    this process, before any case: what a case restores is then the backend's own state)."""
    from harness.devices import compiler_problem, get_device

    device = get_device(run_config.device)
    reason = device.unavailable_reason() or compiler_problem(device, run_config)
    if reason:
        raise pytest.UsageError(f"device {run_config.device} is not usable: {reason}")


def _collect_case_paths(config: pytest.Config) -> None:
    """`--case-path DIR` (and `--harness-shipped-cases`) add cases to what pytest collects, with or without
    positional arguments (pytest would otherwise collect only its testpaths or the paths named)."""
    from harness.registry.shipped import SHIPPED_CASE_DIR

    shipped = [str(SHIPPED_CASE_DIR)] if config.getoption("harness_shipped_cases") else []
    given = [*config.getoption("case_path"), *shipped]
    if given and getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS:
        # `--case-path` without paths of its own: those cases alone, as `harness run --case-path` runs them (not
        # the testpaths, nor the directory pytest started in).
        config.args[:] = []
    named = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    for given in given:
        path = Path(given).resolve()
        if path.exists() and not any(path == n or n in path.parents for n in named):
            config.args.append(str(path))
            named.append(path)


def _run_config(config: pytest.Config) -> RunConfig:
    """The options table's values, checked as the CLI checks them; a bad one is a usage error."""
    import argparse

    from harness.frontends.options import RUN_OPTIONS, check_values, expectations, run_config_from

    values = {option.dest: config.getoption(option.dest) for option in RUN_OPTIONS}
    values["case_path"] = config.getoption("case_path")
    try:
        checked = check_values(values, RUN_OPTIONS)
        config.stash[EXPECTATIONS_KEY] = expectations(checked)
        return run_config_from(checked)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise pytest.UsageError(str(exc)) from None


def _case_roots(config: pytest.Config) -> list[Path]:
    from harness.registry.shipped import SHIPPED_CASE_DIR  # not the registry: it imports torch

    if CASE_ROOTS_KEY not in config.stash:
        config.stash[CASE_ROOTS_KEY] = [
            SHIPPED_CASE_DIR.resolve(),
            *(Path(p).resolve() for p in config.getoption("case_path")),
        ]
    return config.stash[CASE_ROOTS_KEY]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix != ".py" or file_path.name.startswith("_"):
        return None
    resolved = file_path.resolve()
    for root in _case_roots(parent.config):
        if resolved == root or root in resolved.parents:
            return CaseFile.from_parent(parent, path=file_path)
    return None


LOADED_KEY = pytest.StashKey[dict]()
BROKEN_KEY = pytest.StashKey[set]()


def _module_cases(config: pytest.Config, path: Path) -> tuple[list, list]:
    """(cases, load errors) of one case module. Imported in the loader process (`harness.isolation.loader`), with
    every other case module of its root that this session collects: pytest's process runs no case code unless
    cases run in it anyway (`--harness-no-isolation`)."""
    keyword = config.getoption("keyword", None) or None
    include_full = bool(config.getoption("full", False))
    if config.getoption("harness_no_isolation"):
        from harness.registry.sources import load_for_pytest  # case sources (OpInfo), loaded as the selection asks

        registry = load_for_pytest(str(path), keyword, include_full)
        return list(registry.cases.values()), list(registry.errors)
    loaded = config.stash.setdefault(LOADED_KEY, {})
    if str(path) not in loaded:
        from harness.isolation.loader import LoaderFailed, load
        from harness.registry import LoadError

        modules = _batch_of(config, path)
        try:
            answer = load({"kind": "pytest", "modules": modules, "keyword": keyword, "include_full": include_full})
        except LoaderFailed as exc:
            raise pytest.UsageError(f"cannot load cases: {exc}") from None
        config.stash.setdefault(BROKEN_KEY, set()).update(answer.broken_modules)
        broken = {e.source: e for e in answer.errors}
        for module in modules:
            cases, errors = answer.by_module.get(module, ([], []))
            loaded[module] = (cases, errors + ([broken[module]] if module in broken else []))
        loaded.setdefault(str(path), ([], [LoadError(str(path), "the case loader did not answer for it")]))
    return loaded[str(path)]


def _batch_of(config: pytest.Config, path: Path) -> list[str]:
    """`path` and the other case modules of its case root that this session would collect (one loader process
    for all of them: each process imports torch)."""
    root = next((r for r in _case_roots(config) if r == path.resolve() or r in path.resolve().parents), None)
    if root is None or not root.is_dir():
        return [str(path)]
    asked = [Path(arg.split("::")[0]).resolve() for arg in config.args] or [Path.cwd()]
    batch = [str(path)]
    for candidate in sorted(root.rglob("*.py")):
        if any(part.startswith(("_", ".")) for part in candidate.relative_to(root).parts):
            continue
        resolved = candidate.resolve()
        if any(resolved == a or a in resolved.parents for a in asked) and str(candidate) not in batch:
            batch.append(str(candidate))
    return batch


class CaseFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        from harness.layout import dtype_name

        cases, errors = _module_cases(self.config, self.path)
        for error in errors:
            # A failing test rather than a collection error: pytest would stop the whole session.
            yield LoadErrorItem.from_parent(self, name="load-error", message=str(error))
        dynamic = bool(self.config.getoption("dynamic"))
        for case in cases:
            # The id is the run's, as its record and the CLI name it (a dynamic run's says so: `-k dynamic`); -k
            # matches the tags and the size too, through the item's keywords (as markers do).
            suffix = "-dynamic" if dynamic or case.always_dynamic else ""
            for dtype in case.dtypes:
                for mode in case.modes:
                    name = f"{case.name}[{dtype_name(dtype)}-{mode}{suffix}]"
                    item = CaseItem.from_parent(self, name=name, case=case, dtype=dtype, mode=mode)
                    item.add_marker(pytest.mark.harness_case)
                    item.extra_keyword_matches.update((*case.tags, case.size))
                    if case.size == "full":
                        item.add_marker(pytest.mark.full)
                    yield item


class LoadErrorItem(pytest.Item):
    def __init__(self, *, message: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise CaseLoadError(self.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return self.message

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, "case module"


class CaseLoadError(Exception):
    pass


class CaseDiverged(Exception):
    def __init__(self, record: R.CaseResult):
        super().__init__(record.summary())
        self.record = record


class CaseItem(pytest.Item):
    def __init__(self, *, case: Any, dtype: Any, mode: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.case, self.dtype, self.mode = case, dtype, mode

    def runtest(self) -> None:
        from harness.run.case import not_run

        config = self.config
        run_config = session_run_config(config)
        if self.case.size == "full" and not config.getoption("full"):
            record = not_run(
                self.case,
                self.dtype,
                self.mode,
                run_config,
                None,
                skipped="full-size case: run with --harness-full (GPU/NPU nightly)",
            )
        else:
            record = _runner(config).run(self.case, self.dtype, self.mode)
        _keep(config, record)
        if record.status == R.SKIP:
            pytest.skip(record.reason or "skipped")
        if record.status == R.XFAIL:
            pytest.xfail(record.reason or "known failure")
        if R.is_failing(record.status):
            raise CaseDiverged(record)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CaseDiverged):
            record = excinfo.value.record
            text = record.summary()
            if record.status == R.XPASS:
                text += f"\n    passed, but declared a known failure: {record.reason} (remove the declaration)"
            if record.error is not None:
                text += "\n" + record.error.traceback
            text += f"\n    node: {self.nodeid}"
            if localize := record.localize_command(session_run_config(self.config).bisect):
                # The CLI's command: it selects exactly this run, with the session's options, from this directory
                # (a node id of a `--case-path` module is not found without the option, and collects the whole
                # folder with it).
                text += f"\n    localize: {localize}"
            return text + f"\n    reproduce: {record.command}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"case {self.name}"


class _CaseRunner:
    """Runs a case in a worker process of this pytest process (a crash or hang costs one record), or in
    this process with --harness-no-isolation (for a debugger)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.run_config = session_run_config(config)
        self.pool = None

    def run(self, case: Any, dtype: Any, mode: str) -> R.CaseResult:
        from harness.isolation.pool import Task

        task = Task(case, dtype, mode)
        if self.config.getoption("harness_no_isolation"):
            from harness.isolation.pool import run_in_process

            return next(run_in_process([task], self.run_config, self.config.stash.get(EXPECTATIONS_KEY, None)))
        if self.pool is None:
            from harness.isolation.pool import WorkerPool

            self.pool = WorkerPool(
                self.run_config,
                list(self.config.getoption("case_path")),
                self.config.getoption("harness_timeout"),
                broken_modules=self.config.stash.get(BROKEN_KEY, set()),
                isolation=self.config.getoption("harness_isolation"),
                expectations=self.config.stash.get(EXPECTATIONS_KEY, None),
            )
            self.pool.timeout_option = "--harness-timeout"
        return self.pool.run_one(task)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def _runner(config: pytest.Config) -> _CaseRunner:
    if RUNNER_KEY not in config.stash:
        config.stash[RUNNER_KEY] = _CaseRunner(config)
    return config.stash[RUNNER_KEY]


# Results: each process appends its records, as items finish, to a journal of its own; the
# controller merges them (a worker that crashes loses nothing already recorded).


def _journal_base(config: pytest.Config) -> str | None:
    from harness.records.journal import journal_path

    return journal_path(config.getoption("harness_json"), config.getoption("harness_report"))


def _keep(config: pytest.Config, record: R.CaseResult) -> None:
    config.stash[RECORDS_KEY].append(record)
    base = _journal_base(config)
    worker = getattr(config, "workerinput", {}).get("workerid")
    if base is None or worker is None:
        return
    from harness.records.journal import Journal

    if JOURNAL_KEY not in config.stash:
        config.stash[JOURNAL_KEY] = Journal(f"{base.removesuffix('.jsonl')}.{worker}.jsonl")
    config.stash[JOURNAL_KEY].append(record)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if RUNNER_KEY in config.stash:
        config.stash[RUNNER_KEY].close()
    if JOURNAL_KEY in config.stash:
        config.stash[JOURNAL_KEY].close()
    if hasattr(config, "workerinput"):  # an xdist worker: its journal is its report
        return
    records = list(config.stash[RECORDS_KEY]) + _worker_records(config)
    if records:
        from harness.devices import get_device
        from harness.frontends.publish import publish, run_metadata

        run_config = session_run_config(config)
        command = " ".join(["pytest", *config.invocation_params.args])
        _, problems = publish(
            records,
            run_metadata(
                records,
                command=command,
                device=run_config.device,
                backend=run_config.backend,
                emulation=run_config.inject,
                surrogate=get_device(run_config.device).surrogate(),
            ),
            config.getoption("harness_json"),
            config.getoption("harness_report"),
        )
        for problem in problems:
            print(f"harness: error: {problem}", file=sys.stderr)
        if problems:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


def _worker_records(config: pytest.Config) -> list[R.CaseResult]:
    """The records every xdist worker journaled (read back, then removed)."""
    import glob

    from harness.records.journal import read_records

    base = _journal_base(config)
    found: list[R.CaseResult] = []
    for path in sorted(glob.glob(glob.escape(base.removesuffix(".jsonl")) + ".gw*.jsonl")) if base else []:
        found.extend(read_records(path))
        os.remove(path)
    return found


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: Any, sched: Any) -> None:
    """xdist controller: an item whose worker died gets an error record (the case crashed its process)."""
    config = report.config if hasattr(report, "config") else None
    config = config or _CONTROLLER.get("config")
    if config is None:
        return
    record = _crash_record(config, crashitem, getattr(report, "longreprtext", "") or "")
    if record is not None:
        config.stash[RECORDS_KEY].append(record)


_CONTROLLER: dict[str, pytest.Config] = {}


def _crash_record(config: pytest.Config, nodeid: str, text: str) -> R.CaseResult | None:
    """An error record for a crashed item, from its node id (`path::case[dtype-mode-tags]`)."""
    import torch

    from harness.layout import dtype_named
    from harness.run.case import not_run

    match = re.match(r"(?P<path>[^:]+)::(?P<case>[^\[]+)\[(?P<dtype>[^-\]]+)-(?P<mode>[^-\]]+)", nodeid)
    if match is None:
        return None
    from harness.registry import Case, Program

    try:
        dtype = dtype_named(match["dtype"])
    except ValueError:
        dtype = torch.float32
    placeholder = Case(name=match["case"], build=lambda d: Program(lambda: None))
    return not_run(
        placeholder,
        dtype,
        match["mode"],
        session_run_config(config),
        R.Stage.WORKER,
        error=R.ErrorInfo("WorkerCrash", "the pytest worker running this case died", text[-2000:]),
        symptom=R.Symptom.CRASH,
    )
