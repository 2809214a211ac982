"""What a run is expected to fail, and the one place that turns a run's status into xfail or xpass.

Two sources: a case's own `known_failures` (declared in its module) and a
known-issues file (`--known-issues`, the same option in the CLI and pytest),
failures a team has triaged. `Expectations.settle` applies both to every
record a run produces, the worker's and the pool's alike, as the pool hands it
to the frontend (`harness.isolation.pool`): the case's process and the judge
give the verdict as it is, never an expected one.

The file is TOML (or JSON with the same shape), one table per issue:

    [[issue]]
    case = "seed_index_as_strided_*"       # a case name or glob (required)
    link = "https://github.com/..."         # the upstream issue (required)
    reason = "int64 narrowed by the launcher"
    device = "npu"                          # optional filters, as a case's KnownFailure takes them:
    backend = "inductor"                    #   device, backend, npu_backend, dtype, mode, emulation,
    torch = ">=2.9"                         #   torch, torch_npu (version ranges), symptom (a class:
                                            #   "precision-cast-elided")
    status = "fail"                         # optional: the failing status expected (fail or error)
    strict = false                          # optional: a failure seen in some runs only; a pass stays pass

A matching failing run becomes `xfail`; a matching run that passes becomes
`xpass`, which fails the run: the fix is seen the night it lands (unless the
issue says `strict = false`).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch

from harness import records as R
from harness.registry import KnownFailure

if TYPE_CHECKING:
    from harness.registry import Case

_FILTERS = {f.name for f in fields(KnownFailure)} - {"reason", "strict"}


@dataclass(frozen=True)
class KnownIssue:
    case: str
    link: str
    failure: KnownFailure
    status: str | None = None

    def applies(self, record: R.CaseResult) -> bool:
        return fnmatch.fnmatchcase(record.case, self.case) and self.failure.matches(
            bool(record.surrogate), **_run_of(record)
        )

    def apply(self, record: R.CaseResult) -> None:
        if record.status == R.PASS and not self.failure.strict:
            record.reason = (
                f"known issue that shows in some runs only, not in this one: {self.failure.reason} ({self.link})"
            )
            return
        if record.status == R.PASS:
            record.conclude(R.XPASS, record.stage, record.symptom)
        elif R.is_failing(record.status) and record.status != R.XPASS and self.status in (None, str(record.status)):
            record.conclude(R.XFAIL, record.stage, record.symptom)
        else:
            return
        record.reason = f"known issue: {self.failure.reason} ({self.link})"
        record.issue = record.issue or self.link


def load_known_issues(path: str) -> list[KnownIssue]:
    """The file's issues; ValueError with the file and the problem when it cannot be used."""
    try:
        with R.open_input(path, "rb") as handle:
            raw = handle.read()
        if path.endswith(".json"):
            data = json.loads(raw)
        else:
            import tomllib

            data = tomllib.loads(raw.decode("utf-8"))
    except (OSError, ValueError, ModuleNotFoundError) as exc:
        raise ValueError(f"{path}: not a usable known-issues file ({type(exc).__name__}: {exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: not a usable known-issues file (nested too deeply to read)") from None
    entries = data.get("issue") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a list of [[issue]] tables")
    issues = []
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: issue {number}: expected a table of keys, not {type(entry).__name__}")
        missing = [k for k in ("case", "link") if not entry.get(k)]
        if not isinstance(entry.get("strict", True), bool):
            raise ValueError(f"{path}: issue {number}: strict must be true or false")
        # Every other value is text: a number where a case glob goes would fail only when the first record is
        # matched against it, after the run had started.
        wrong = [f"{key} = {value!r}" for key, value in entry.items() if key != "strict" and not isinstance(value, str)]
        if wrong:
            raise ValueError(f"{path}: issue {number}: must be text (in quotes): {', '.join(wrong)}")
        if entry.get("status") not in (None, "fail", "error"):
            raise ValueError(f"{path}: issue {number}: status must be \"fail\" or \"error\", not {entry['status']!r}")
        unknown = sorted(set(entry) - _FILTERS - {"case", "link", "reason", "status", "strict"})
        if missing or unknown:
            raise ValueError(
                f"{path}: issue {number}: "
                + "; ".join(
                    ([f"missing {', '.join(missing)}"] if missing else [])
                    + ([f"unknown keys {', '.join(unknown)}"] if unknown else [])
                )
            )
        filters = {k: v for k, v in entry.items() if k in _FILTERS}
        failure = KnownFailure(entry.get("reason", "known issue"), **filters, strict=entry.get("strict", True))
        issues.append(KnownIssue(entry["case"], entry["link"], failure, entry.get("status")))
    return issues


def _run_of(record: R.CaseResult) -> dict[str, Any]:
    """The words of a run a known failure's filters match."""
    return {
        "device": record.device,
        "backend": record.backend,
        "npu_backend": record.npu_backend,
        "dtype": record.dtype,
        "mode": record.mode,
        "emulation": record.emulation,
        "torch": record.versions.get("torch") or torch.__version__,
        "torch_npu": record.versions.get("torch_npu"),
        "symptom": record.symptom,
    }


def _declared(record: R.CaseResult, known: KnownFailure) -> None:
    """A case's declared failure turns fail, error or nondeterministic into xfail, and pass into xpass unless it
    is declared not strict."""
    if record.status == R.PASS and not known.strict:
        record.reason = f"known failure that shows in some runs only, not in this one: {known.reason}"
        return
    record.conclude(R.XPASS if record.status == R.PASS else R.XFAIL, record.stage, record.symptom, known.reason)


@dataclass(frozen=True)
class Expectations:
    """The failures a run expects: each case's declared ones, and the known-issues file's `issues`."""

    issues: tuple[KnownIssue, ...] = ()

    def settle(self, record: R.CaseResult, case: Case | None) -> R.CaseResult:
        """The record with its expected failure applied: the case's declaration first, then the first issue of
        the file that matches, unless the declaration decided. A skip stays a skip. (`case` None: no declaration.)"""
        if record.status == R.SKIP:
            return record
        if record.status == R.ERROR and record.error is not None and record.error.harness_failed:
            # A harness bug is never the failure a case or a team declared: it stays an error, and says why.
            record.warnings.append("a harness bug, not the declared failure: no expected failure applies to it")
            return record
        known = case.known_failure(bool(record.surrogate), **_run_of(record)) if case is not None else None
        if known is not None:
            _declared(record, known)
        if record.status in R.EXPECTED_STATUSES:
            return record
        for issue in self.issues:  # also over a declaration not strict that this run passes
            if issue.applies(record):
                issue.apply(record)
                break
        return record
