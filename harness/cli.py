"""`python -m harness list | run | report`.

Exit codes: 0 every run passed (skips and expected failures included), 1 a run
diverged, errored or passed unexpectedly, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import time
from typing import Sequence

from . import records as R

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
INJECTIONS_HINT = "see `python -m harness list --injections`"


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (no usage dump) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="harness", description="Differential accuracy testing for torch.compile.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = commands.add_parser("list", help="list the cases a selection would run")
    _add_selection(listing)
    listing.add_argument("--injections", action="store_true", help="list the --inject names instead")

    run = commands.add_parser("run", help="run cases: eager vs compiled, element by element")
    _add_selection(run)
    run.add_argument("--device", default="cpu", help="cpu, cuda or npu (default: cpu)")
    run.add_argument("--backend", default="inductor", help="torch.compile backend (default: inductor)")
    run.add_argument("--npu-backend", help="Inductor's npu_backend option on --device npu (default: triton_experimental)")
    run.add_argument("--mode", action="append", choices=("inference", "training"), help="only these modes (repeatable)")
    run.add_argument("--dtype", action="append", help="only these dtypes, e.g. int64 (repeatable)")
    run.add_argument("--compile-mode", help="torch.compile mode, e.g. max-autotune")
    run.add_argument("--compile-option", action="append", default=[], metavar="KEY=VALUE",
                     help="an Inductor config option for every case (repeatable)")
    run.add_argument("--reference", choices=("auto", "fp64", "none"),
                     help="float64 reference: auto (when a float output misses tolerance), fp64 (always), none")
    run.add_argument("--inject", help=f"emulate another backend's launch boundary or inject a kernel fault ({INJECTIONS_HINT})")
    run.add_argument("--bisect", action="store_true", help="probe every kernel launch and name the first whose output diverges")
    run.add_argument("--json", dest="json_path", help="write the result records here")
    run.add_argument("--report-dir", help="write results.json and an HTML report into this directory")
    run.add_argument("--timeout", type=float, default=1800.0, help="seconds one case may run before it is stopped (default 1800)")
    run.add_argument("--no-isolation", action="store_true", help="run cases in this process (a crash then ends the run)")

    report = commands.add_parser("report", help="render result files as one HTML report")
    report.add_argument("results", nargs="+", help="results JSON files (shards are merged)")
    report.add_argument("-o", "--output", default="reports/index.html")
    report.add_argument("--baseline", help="an earlier results file to diff against")
    return parser


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cases", nargs="*", help="case names (default: all but full-size cases)")
    parser.add_argument("-k", dest="keyword", help="pytest-style expression over case names and tags")
    parser.add_argument("--tag", action="append", default=[], help="only cases with this tag (repeatable)")
    parser.add_argument("--case-path", action="append", default=[], help="more case modules: a directory, .py file or module")
    parser.add_argument("--full", action="store_true", help="include full-size cases (real shapes, whole models)")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return {"list": _list, "run": _run, "report": _report}[args.command](args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _select(args: argparse.Namespace):
    from .registry import load_registry

    registry = load_registry(args.case_path)
    for error in registry.errors:
        print(f"error: {error}", file=sys.stderr)
    try:
        chosen = registry.select(args.cases, args.keyword, args.tag, include_full=args.full)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    except Exception as exc:  # a malformed -k expression
        raise UsageError(f"bad selection: {exc}") from None
    return registry, chosen


def _list(args: argparse.Namespace) -> int:
    if args.injections:
        from .emulation import INJECTIONS

        for name, injection in INJECTIONS.items():
            print(f"{name:28} {injection.summary}")
        return EXIT_OK
    registry, chosen = _select(args)
    for case in chosen:
        dtypes = ",".join(str(d).removeprefix("torch.") for d in case.dtypes)
        print(f"{case.name:40} {case.size:4} {','.join(case.modes):20} {dtypes:22} {' '.join(case.tags)}")
    print(f"{len(chosen)} cases", file=sys.stderr)
    return EXIT_USAGE if registry.errors else EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from .devices import UnknownDeviceError, get_device
    from .executor import Task, run_in_process, run_isolated
    from .runner import RunConfig, runs_of

    try:
        device = get_device(args.device)
    except UnknownDeviceError as exc:
        raise UsageError(str(exc)) from None
    unavailable = device.unavailable_reason()
    if unavailable:
        raise UsageError(f"device {args.device} is not usable: {unavailable}")
    _check_dtypes(args.dtype or [])
    if args.inject:
        _check_injection(args.inject)
    config = RunConfig(
        device=args.device, backend=args.backend, npu_backend=args.npu_backend,
        compile_mode=args.compile_mode, compile_options=_parse_options(args.compile_option, args.device),
        reference=args.reference, inject=args.inject, bisect=args.bisect,
    )
    registry, chosen = _select(args)
    tasks = [Task(case, str(dtype).removeprefix("torch."), mode)
             for case in chosen for dtype, mode in runs_of(case, args.dtype, args.mode)]
    if not tasks:
        raise UsageError("no case, dtype and mode matches the selection (`python -m harness list` shows the cases)")

    started_at, started = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
    print(f"running {len(tasks)} case runs on {args.device} with backend {args.backend}"
          + (f" (emulation: {args.inject})" if args.inject else ""), flush=True)
    runs = run_in_process(tasks, config) if args.no_isolation else run_isolated(tasks, config, args.case_path, args.timeout)
    results: list[R.CaseResult] = []
    for position, record in enumerate(runs, 1):
        results.append(record)
        print(f"[{position}/{len(tasks)}] {record.summary()}", flush=True)

    run_meta = {
        "started_at": started_at, "duration_s": round(time.perf_counter() - started, 3),
        "device": args.device, "backend": args.backend, "emulation": args.inject,
        "command": " ".join(["python -m harness", *sys.argv[1:]]) if argv_is_cli() else None,
        "versions": next((r.versions for r in results if r.versions), {}),
        "load_errors": [str(e) for e in registry.errors],
    }
    _write_outputs(args, results, run_meta)
    print(_totals(results))
    if registry.errors:
        return EXIT_USAGE
    return EXIT_FAILED if any(r.status in R.FAILING_STATUSES for r in results) else EXIT_OK


def argv_is_cli() -> bool:
    return os.path.basename(sys.argv[0]) in ("__main__.py", "harness")


def _write_outputs(args: argparse.Namespace, results: list[R.CaseResult], run_meta: dict) -> None:
    json_path = args.json_path or (os.path.join(args.report_dir, "results.json") if args.report_dir else None)
    if json_path:
        R.write_results(json_path, results, run_meta)
        print(f"results: {json_path}")
    if args.report_dir:
        from .report import write_report

        print(f"report: {write_report([json_path], os.path.join(args.report_dir, 'index.html'))}")


def _report(args: argparse.Namespace) -> int:
    missing = [p for p in args.results + ([args.baseline] if args.baseline else []) if not os.path.isfile(p)]
    if missing:
        raise UsageError(f"no such results file: {', '.join(missing)}")
    from .report import write_report

    try:
        print(write_report(args.results, args.output, args.baseline))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def _totals(results: list[R.CaseResult]) -> str:
    counts = {status: sum(r.status == status for r in results) for status in R.STATUSES}
    return "== " + ", ".join(f"{n} {status}" for status, n in counts.items() if n) + " =="


def _check_dtypes(names: list[str]) -> None:
    import torch

    bad = [n for n in names if not isinstance(getattr(torch, n, None), torch.dtype)]
    if bad:
        raise UsageError(f"unknown dtype {', '.join(bad)}; use torch's names, e.g. float32, bfloat16, int64")


def _check_injection(name: str) -> None:
    from .emulation import parse_injection

    try:
        parse_injection(name)
    except ValueError as exc:
        raise UsageError(f"{exc} ({INJECTIONS_HINT})") from None


def _parse_options(pairs: list[str], device: str) -> dict:
    from torch._inductor import config as inductor_config

    known = set(inductor_config.get_config_copy())
    options = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise UsageError(f"--compile-option {pair!r} is not KEY=VALUE")
        if key not in known and not (device == "npu" and key == "npu_backend"):
            raise UsageError(f"--compile-option {key!r} is not an Inductor config option of torch {_torch_version()}")
        try:
            options[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[key] = text
    return options


def _torch_version() -> str:
    import torch

    return torch.__version__
