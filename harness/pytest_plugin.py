"""pytest plugin: every case x dtype x mode in `cases/` (and --case-path) becomes a test.

A thin layer: collection asks the registry, each test calls `run_case`, and
results go to the same JSON records the CLI writes (merged across xdist
workers). Test ids carry the case name and tags, so `pytest -k longformer`
or `pytest -k seed` select what users expect.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from . import records as R

RECORDS_KEY = pytest.StashKey[list]()
RUN_CONFIG_KEY = pytest.StashKey[Any]()
WORKER_OUTPUT = "harness_records"


def pytest_addoption(parser: pytest.Parser) -> None:
    from .options import RUN_OPTIONS, SELECTION_OPTIONS, add_to_pytest

    group = parser.getgroup("harness", "torch.compile accuracy harness")
    add_to_pytest(group, RUN_OPTIONS + SELECTION_OPTIONS)
    group.addoption("--harness-json", default=None, metavar="PATH", help="write the case results here")
    group.addoption("--harness-report", default=None, metavar="DIR", help="write results.json and index.html here")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full: a full-size case (real shapes, whole models): needs --harness-full")
    config.addinivalue_line("markers", "harness_case: a test generated from a harness case")
    config.stash[RECORDS_KEY] = []
    config.stash[RUN_CONFIG_KEY] = _run_config(config)


def _run_config(config: pytest.Config) -> Any:
    """The options table's values, checked as the CLI checks them; a bad one is a usage error."""
    import argparse

    from .options import RUN_OPTIONS, check_values, run_config_from

    values = {option.dest: config.getoption(option.dest) for option in RUN_OPTIONS}
    try:
        return run_config_from(check_values(values, RUN_OPTIONS))
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise pytest.UsageError(str(exc)) from None


def _case_roots(config: pytest.Config) -> list[Path]:
    from .registry import DEFAULT_CASE_DIR

    return [DEFAULT_CASE_DIR, *(Path(p).resolve() for p in config.getoption("case_path"))]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix != ".py" or file_path.name.startswith("_"):
        return None
    resolved = file_path.resolve()
    for root in _case_roots(parent.config):
        if resolved == root or root in resolved.parents:
            return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        from .runner import dtype_name
        from .sources import load_for_pytest  # case sources (OpInfo), loaded as the selection asks: harness/sources.py

        registry = load_for_pytest(str(self.path), self.config)
        for error in registry.errors:
            # A failing test rather than a collection error: pytest would stop the whole session.
            yield LoadErrorItem.from_parent(self, name="load-error", message=str(error))
        for case in registry.cases.values():
            for dtype in case.dtypes:
                for mode in case.modes:
                    name = f"{case.name}[{dtype_name(dtype)}-{mode}-{'-'.join(case.tags)}]"
                    item = CaseItem.from_parent(self, name=name, case=case, dtype=dtype, mode=mode)
                    item.add_marker(pytest.mark.harness_case)
                    for tag in case.tags:
                        item.extra_keyword_matches.add(tag)
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
        from .runner import new_record, run_case

        config = self.config
        run_config = config.stash[RUN_CONFIG_KEY]
        if self.case.size == "full" and not config.getoption("full"):
            record = new_record(self.case, self.dtype, self.mode, run_config)
            record.status, record.reason = R.SKIP, "full-size case: run with --harness-full (GPU/NPU nightly)"
        else:
            record = run_case(self.case, self.dtype, self.mode, run_config)
        config.stash[RECORDS_KEY].append(record)
        if record.status == R.SKIP:
            pytest.skip(record.reason or "skipped")
        if record.status == R.XFAIL:
            pytest.xfail(record.reason or "known failure")
        if record.status in R.FAILING_STATUSES:
            raise CaseDiverged(record)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CaseDiverged):
            record = excinfo.value.record
            text = record.summary()
            if record.status == R.XPASS:
                text += f"\n    passed, but declared a known failure: {record.reason} (remove the declaration)"
            if record.error is not None:
                text += "\n" + record.error.traceback
            return text + f"\n    reproduce: {record.command}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"case {self.name}"


# Results: each process keeps its records; xdist workers hand theirs to the controller.

def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    records = config.stash[RECORDS_KEY]
    if hasattr(config, "workeroutput"):  # an xdist worker
        config.workeroutput[WORKER_OUTPUT] = json.dumps([r.to_dict() for r in records])
        return
    if records:
        from .publish import publish, run_metadata

        run_config = config.stash[RUN_CONFIG_KEY]
        command = " ".join(["pytest", *config.invocation_params.args])
        publish(records, run_metadata(records, command=command, device=run_config.device,
                                      backend=run_config.backend, emulation=run_config.inject),
                config.getoption("harness_json"), config.getoption("harness_report"))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: collect the records a finished worker sent."""
    payload = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
    if payload:
        node.config.stash[RECORDS_KEY].extend(R.CaseResult.from_dict(d) for d in json.loads(payload))
