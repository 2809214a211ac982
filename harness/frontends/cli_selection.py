"""Which runs a command line selects: its cases (loaded in a process of their own), filters, shard and earlier
failures."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from harness import records as R
from harness.frontends.cli_console import ErrorsSaid, UsageError, say
from harness.records.journal import read_records


def select_cases(args: argparse.Namespace, in_process: bool = False):
    """The cases the selection names, and what loading them found (`case_loader.Loaded`, or the registry itself
    with `in_process`). Case modules are imported in a loader process unless the run is in-process anyway."""
    request = {
        "kind": "select",
        "paths": list(args.case_path),
        "names": list(args.cases),
        "keyword": args.keyword,
        "tags": list(args.tag),
        "include_full": args.full,
        "include_default": with_shipped(args),
        "dynamic": bool(getattr(args, "dynamic", None)),
    }
    if in_process:
        loaded = _select_in_process(request)
    else:
        from harness.isolation.loader import LoaderFailed, load

        try:
            loaded = load(request)
        except LoaderFailed as exc:
            raise UsageError(f"cannot load cases: {exc}") from None
    for error in loaded.errors:
        say(f"error: {error}", error=True)
    if loaded.usage:
        raise UsageError(loaded.usage)
    if loaded.errors and not loaded.chosen:  # (the errors said why: "no case matches" would be a second line)
        raise ErrorsSaid()
    if not loaded.case_count and not loaded.errors:
        raise UsageError(
            f"no cases found: this installation has no cases/ directory ({loaded.describe_sources()}); "
            "point at case modules with --case-path DIR"
        )
    return loaded, loaded.chosen


def with_shipped(args: argparse.Namespace) -> bool:
    """The shipped cases are the default selection; `--case-path` replaces them, as in pytest, unless
    `--shipped-cases` asks for both."""
    return not args.case_path or args.shipped_cases


def _select_in_process(request: dict[str, Any]):
    """`--no-isolation`: the same selection, made with the case modules imported here (for a debugger)."""
    from harness.isolation.loader import Loaded
    from harness.registry import load_registry

    registry = load_registry(request["paths"], include_default=request["include_default"])
    loaded = Loaded(sources=registry.sources)
    try:
        loaded.chosen = registry.select(
            request["names"],
            request["keyword"],
            request["tags"],
            include_full=request["include_full"],
            dynamic=request["dynamic"],
        )
    except KeyError as exc:
        loaded.usage = exc.args[0]
    except Exception as exc:  # noqa: BLE001 - a malformed -k expression
        loaded.usage = f"bad selection: {exc}"
    loaded.errors, loaded.case_count = list(registry.errors), len(registry.cases)
    return loaded


@dataclass
class Plan:
    tasks: list
    carried: list[R.CaseResult]
    selection: str  # the whole selection's fingerprint, which its shards share (`report.shards`)


def plan_runs(
    args: argparse.Namespace,
    chosen: list,
    resumed: list[R.CaseResult],
    baseline: list[R.CaseResult] | None,
    config: Any,
) -> Plan:
    """The runs of this invocation: the selection, this shard of it, less what `--resume` already has. Against a
    baseline, `--bisect` localizes only new failures: a run that failed there too is known."""
    from harness.isolation.pool import Task
    from harness.layout import dtype_name
    from harness.report.baseline import known_failing
    from harness.report.shards import selection_fingerprint
    from harness.run.config import runs_of

    known = {key[:3] for key in known_failing(baseline)} if baseline and args.bisect != "always" else set()
    tasks = [
        Task(case, dtype, mode, localize=(case.name, dtype_name(dtype), mode) not in known)
        for case in chosen
        for dtype, mode in runs_of(case, args.dtype, args.mode, args.keyword, bool(args.dynamic))
    ]
    if not tasks:
        raise UsageError("no case, dtype and mode matches the selection (`harness list` shows the cases)")
    # Shards of one night: the same runs under the same identity (`--resume`'s rule; how much each localizes is not
    # part of it).
    selection = selection_fingerprint((t.key for t in tasks), config.identity())
    if args.shard:
        index, count = args.shard
        tasks = [t for position, t in enumerate(sorted(tasks, key=lambda t: t.key)) if position % count == index - 1]
    if args.last_failed:
        failed = _failed_runs(args.last_failed)
        tasks = [t for t in tasks if t.key in failed]
        if not tasks:
            raise UsageError(f"--last-failed {args.last_failed}: none of its failing runs is in the selection")
    done = {(r.case, r.dtype, r.mode) for r in resumed}
    # A journal may hold a run twice (a pass, then a fail): it is carried once, with the worse status.
    resumed, _ = R.worst_of_each(resumed, lambda r: (r.case, r.dtype, r.mode))
    carried = [r for r in resumed if (r.case, r.dtype, r.mode) in {t.key for t in tasks}]
    return Plan([t for t in tasks if t.key not in done], carried, selection)


def _failed_runs(path: str) -> set[tuple[str, str, str]]:
    try:
        records = read_records(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return {(r.case, r.dtype, r.mode) for r in records if R.is_failing(r.status)}
