"""`harness list`: the selected cases and their runs, or the runs a selection skips and why."""

from __future__ import annotations

import argparse

from harness import records as R
from harness.frontends.cli_console import EXIT_OK, EXIT_USAGE, UsageError, plural, say
from harness.frontends.cli_selection import select_cases, with_shipped


def list_command(args: argparse.Namespace) -> int:
    if args.injections:
        from harness.inject.launch import injection_named, injection_names

        say(f"{'INJECTION':28} {'SELECTOR':10} WHAT IT DOES")
        for name in injection_names():
            injection = injection_named(name)
            selector = "required" if injection.needs_selector else "optional" if injection.takes_selector else "-"
            source = f" [{injection.source}]" if injection.source else ""
            say(f"{name:28} {selector:10} {injection.summary}{source}")
        say(
            "A selector picks kernel launches: NAME@LAUNCH (a launch index from 0, e.g. fault-scale@3) or "
            "NAME@GLOB (kernel names, e.g. fault-scale@'triton_per_*'; torch_npu names its kernels triton_unk_*); "
            "without one, every launch it applies to."
        )
        return EXIT_OK
    from harness.layout import dtype_name
    from harness.run.config import runs_of

    if args.skipped:  # case sources' skips, with reasons (OpInfo: harness/registry/sources.py)
        return _list_skipped(args)
    loaded, chosen = select_cases(args)
    say(f"{'CASE':40} {'SIZE':4} {'MODES':20} {'DTYPES':22} TAGS")
    runs = 0
    listed = 0
    for case in chosen:
        kept = runs_of(case, args.dtype, args.mode, args.keyword)  # what `run` with the same selection would run
        if not kept:
            continue
        listed += 1
        runs += len(kept)
        modes = ",".join(dict.fromkeys(mode for _, mode in kept))
        dtypes = ",".join(dict.fromkeys(dtype_name(dtype) for dtype, _ in kept))
        say(f"{case.name:40} {case.size:4} {modes:20} {dtypes:22} {R.one_line(' '.join(case.tags))}")
    say(f"{plural(listed, 'case')}, {plural(runs, 'case run')}", error=True)
    if not runs:
        say("error: no case, dtype and mode matches the selection", error=True)
    return EXIT_USAGE if loaded.errors or not runs else EXIT_OK


def _list_skipped(args: argparse.Namespace) -> int:
    """What the selected case sources leave out, and why (asked of the loader process)."""
    from harness.isolation.loader import LoaderFailed, load

    try:
        loaded = load(
            {
                "kind": "skipped",
                "paths": list(args.case_path),
                "names": list(args.cases),
                "keyword": args.keyword,
                "tags": list(args.tag),
                "include_default": with_shipped(args),
            }
        )
    except LoaderFailed as exc:
        raise UsageError(f"cannot load cases: {exc}") from None
    if loaded.skipped is None:
        say("no case source matches the selection (try --tag opinfo)")
        return EXIT_OK
    if loaded.skipped_error:
        say(f"error: {loaded.skipped_error}", error=True)
        return EXIT_USAGE
    say(f"{'SKIPPED':60} REASON")
    for what, why in loaded.skipped:
        say(f"{R.one_line(what):60} {R.one_line(why)}")
    say(f"{len(loaded.skipped)} skipped")
    return EXIT_OK
