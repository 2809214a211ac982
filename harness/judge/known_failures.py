"""What a run is expected to fail: a case's declared failures and the known-issues file's, as plain values.

Two sources: a case's own `known_failures` (declared in its module) and a
known-issues file (`--known-issues`, the same option in the CLI and pytest),
failures a team has triaged. `Expectations.for_case` gives one run's
`Expectation` (its case's declarations, the file's issues that name it), which
travels with the task to where the run is decided: `harness.judge.decision`
applies it there, and nowhere else.

The file is TOML (or JSON with the same shape), one table per issue:

    [[issue]]
    case = "seed_index_as_strided_*"       # a case name or glob (required)
    link = "https://github.com/..."         # the upstream issue (required)
    reason = "int64 narrowed by the launcher"
    device = "npu"                          # optional filters, as a case's KnownFailure takes them:
    backend = "inductor"                    #   device, backend, npu_backend, dtype, mode, emulation,
    torch = ">=2.9"                         #   torch, torch_npu (version ranges), symptom (a class:
                                            #   "precision-cast-elided"), mechanism (what the run showed:
                                            #   "launcher-narrowing")
    status = "fail"                         # optional: the failing status expected (fail or error)
    strict = false                          # optional: a failure seen in some runs only; a pass stays pass

A matching failing run becomes `xfail`; a matching run that passes becomes
`xpass`, which fails the run: the fix is seen the night it lands (unless the
issue says `strict = false`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from dataclasses import dataclass, fields
from typing import Any, Protocol

from harness import records as R


@dataclass(frozen=True)
class KnownFailure:
    """A declared failure: the run it matches becomes a strict expected failure.

    Every field left None matches anything. A matching run that passes is
    reported as `xpass`, which fails the run: the fix is visible at once.
    `torch` is a version range the failure is known on, as comma-separated
    clauses (`">=2.11,<2.14"`) or a release prefix (`"2.13"` matches 2.13.x).
    `torch_npu` is the same for the torch_npu release whose compiler ran (a
    bug found in torch_npu's own code: the torch_npu mode of the surrogate runs
    it, whose label names the release); a stand-in's own version
    (`2.14.0+surrogate`, no torch_npu code ran) matches none.
    A failure that shows in some runs only (a race between thread blocks) is
    declared `strict=False`: a matching run that passes then stays `pass`, with
    a reason saying the known failure did not show. A declaration naming a
    device is about that device: a surrogate standing in for it (a CPU-backed
    NPU) runs other kernels, and none of it applies there.
    """

    reason: str
    device: str | None = None
    backend: str | None = None
    npu_backend: str | None = None
    dtype: str | None = None
    mode: str | None = None
    emulation: str | None = None
    torch: str | None = None
    torch_npu: str | None = None
    # A class of failure, by the run's symptom ("precision-cast-elided": a known-issues line declares it known).
    symptom: str | None = None
    # A class of failure, by the mechanism the run itself showed (a record's `mechanism`: "launcher-narrowing",
    # "select-lane-load"). Such a declaration matches failing runs only: a run that passes shows no mechanism,
    # so it stays a pass (no xpass).
    mechanism: str | None = None
    strict: bool = True

    def matches(self, surrogate: bool = False, **run: str | None) -> bool:
        if surrogate and self.device is not None:
            return False
        for field_name in ("torch", "torch_npu"):
            spec, version = getattr(self, field_name), run.pop(field_name, None)
            if spec is not None and (version is None or not torch_version_matches(version, spec)):
                return False
        return all(getattr(self, key) in (None, value) for key, value in run.items())


def torch_version_matches(version: str, spec: str) -> bool:
    """Whether a torch (or torch_npu) version (`2.13.0+cpu`) is in `spec`: `>=2.11,<2.14`, `==2.13.0`, or a
    prefix `2.13`. A surrogate's own version (`+surrogate`) is no release: it matches nothing, nor does a version
    that is not one (a checkout's "unknown").

    A range is about the code a build ships, so a release's pre-releases and dev builds (`2.13.0rc1`,
    `2.13.0.rc1`, `2.13.0.dev0+g1a2b3c`) count as that release: `>=2.13.0` takes them in and `<2.13.0` leaves
    them out, where PEP 440 alone sorts them before 2.13.0. A bound that names a pre-release (`>2.13.0rc1`: a
    bug 2.13.0rc1 does not have) compares exactly. A local label (`+cpu`) is ignored in a comparison."""
    from torch._vendor.packaging.version import InvalidVersion, Version

    if version.endswith("+surrogate"):
        return False
    try:
        current = Version(version)
    except InvalidVersion:
        return False
    release = [str(part) for part in current.release]
    public = Version(".".join(release)) if current.is_prerelease else Version(current.public)
    for clause in (c.strip() for c in spec.split(",") if c.strip()):
        operator_text = re.match(r"^(>=|<=|==|!=|>|<)?", clause).group(1)
        bound_text = clause[len(operator_text or "") :].strip()
        if not operator_text:
            if release[: len(bound_text.split("."))] != bound_text.split("."):
                return False
            continue
        bound = Version(bound_text)
        # A bound that names a pre-release itself (`>2.13.0rc1`) is compared with the build's exact version.
        left = Version(current.public) if bound.is_prerelease else public
        checks = {
            ">=": left >= bound,
            "<=": left <= bound,
            ">": left > bound,
            "<": left < bound,
            "==": left == bound,
            "!=": left != bound,
        }
        if not checks[operator_text]:
            return False
    return True


# What a run is matched by: every field of a declared failure but its reason and strictness.
FILTERS = {f.name for f in fields(KnownFailure)} - {"reason", "strict"}


@dataclass(frozen=True)
class KnownIssue:
    case: str
    link: str
    failure: KnownFailure
    status: str | None = None

    def names(self, case: str) -> bool:
        return fnmatch.fnmatchcase(case, self.case)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KnownIssue":
        return cls(data["case"], data["link"], KnownFailure(**data["failure"]), data.get("status"))


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
        unknown = sorted(set(entry) - FILTERS - {"case", "link", "reason", "status", "strict"})
        if missing or unknown:
            raise ValueError(
                f"{path}: issue {number}: "
                + "; ".join(
                    ([f"missing {', '.join(missing)}"] if missing else [])
                    + ([f"unknown keys {', '.join(unknown)}"] if unknown else [])
                )
            )
        filters = {k: v for k, v in entry.items() if k in FILTERS}
        failure = KnownFailure(entry.get("reason", "known issue"), **filters, strict=entry.get("strict", True))
        issues.append(KnownIssue(entry["case"], entry["link"], failure, entry.get("status")))
    return issues


@dataclass(frozen=True)
class Expectation:
    """What one run is expected to fail: its case's declarations (the first that matches applies) and the
    known-issues file's issues that name its case (the first that matches applies, unless a declaration decided).
    A plain value: it goes with the task to the process that decides the run."""

    declared: tuple[KnownFailure, ...] = ()
    issues: tuple[KnownIssue, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "declared": [dataclasses.asdict(k) for k in self.declared],
            "issues": [i.to_dict() for i in self.issues],
        }

    @classmethod
    def from_dict(cls, data: Any) -> "Expectation":
        if not data:
            return cls()
        return cls(
            tuple(KnownFailure(**k) for k in data.get("declared") or ()),
            tuple(KnownIssue.from_dict(i) for i in data.get("issues") or ()),
        )


class DeclaresFailures(Protocol):
    """A case, as far as its expected failures go (`harness.registry.Case`)."""

    name: str
    known_failures: tuple[KnownFailure, ...]


@dataclass(frozen=True)
class Expectations:
    """The failures a run expects: each case's declared ones, and the known-issues file's `issues`."""

    issues: tuple[KnownIssue, ...] = ()

    def for_case(self, case: DeclaresFailures | None) -> Expectation:
        """One run's expectation (`case` None: no declaration)."""
        if case is None:
            return Expectation(issues=self.issues)
        return Expectation(tuple(case.known_failures), tuple(i for i in self.issues if i.names(case.name)))
