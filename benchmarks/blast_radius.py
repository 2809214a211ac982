"""The blast radius of a launch-boundary bug over the OpInfo sweep: which ops and layouts it breaks.

    python benchmarks/blast_radius.py --device cuda --inject boundary-downcast [--full] [--fix boundary-downcast-strided]
        [-k EXPR] [--shard I/N] [--out reports/blast-radius] [--timeout 600]
        [--baseline RESULTS.json] [--bug RESULTS.json]

Runs the OpInfo sweep three times with `python -m harness run --tag opinfo`:
plainly (the baseline: what fails without any injection), under `--inject`
(the bug), and under `--fix` (the proposed fix, by default the stride-preserving
`boundary-downcast-strided`). A run is *broken by the injection* when it passes
plainly and fails, errs or passes unexpectedly under it; a run the injection did
not reach (no generated kernel launched: `injection-missed`) is counted apart,
neither broken nor spared. For every broken op it
answers whether a non-dense int64/float64 argument reached a kernel in its
broken runs (the records' `injection_stats.non_dense_args`), and how many of
its arguments shared a storage with another argument of the launch
(`aliased_args`: a kernel writing slices of a buffer it also reads), and writes:

- `blast_radius.md`: the op x layout table (broken runs / runs per cell), one
  line per broken op (dtypes, modes, non-dense 64-bit argument reached,
  converted arguments, the harness's diagnosis: narrowing or layout), and what
  the fix breaks (it must break nothing);
- `blast_radius.json`: the same as data;
- `results-baseline.json`, `results-<inject>.json`, `results-<fix>.json`: the
  records (render any of them with `python -m harness report`).

Exit code 0 when the fix breaks nothing, 1 when it breaks something, 2 on a
usage or setup error. `--baseline`/`--bug`/`--fix-results` reuse earlier
results files instead of running again (the table is then made from records only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from harness.records import CaseResult, InjectionStats, read_results  # noqa: E402  (no torch: records only)
from harness.report.summary import _LAYOUT_ORDER, op_and_layout  # noqa: E402

FAILING = {"fail", "error", "xpass", "nondeterministic"}


def run_sweep(args: argparse.Namespace, inject: str | None, path: str) -> float:
    command = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "--tag",
        "opinfo",
        "--device",
        args.device,
        "--json",
        path,
        "--timeout",
        str(args.timeout),
        "--workers",
        str(args.workers),
    ]
    if args.full:
        command.append("--full")
    if args.keyword:
        command += ["-k", args.keyword]
    if args.shard:
        command += ["--shard", args.shard]
    if inject:
        command += ["--inject", inject]
    print(f"$ {' '.join(command)}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, stdout=None if args.verbose else subprocess.DEVNULL)
    if done.returncode == 2 or not os.path.isfile(path):
        raise SystemExit(f"the sweep did not run (exit code {done.returncode}): {' '.join(command)}")
    return time.perf_counter() - started


def key(record: CaseResult) -> tuple[str, str, str]:
    return record.case, record.dtype, record.mode


def broken_runs(baseline: list[CaseResult], injected: list[CaseResult]) -> list[CaseResult]:
    """Runs that pass without the injection and fail, err or pass unexpectedly with it (reached by it)."""
    plain = {key(r): str(r.status) for r in baseline}
    return [r for r in injected if str(r.status) in FAILING and plain.get(key(r)) == "pass" and not missed(r)]


def missed(record: CaseResult) -> bool:
    """A run the injection never reached (`injection-missed`): nothing in the program it applies to."""
    return record.symptom == "injection-missed"


def analyse(baseline: list[CaseResult], injected: list[CaseResult], fixed: list[CaseResult] | None) -> dict[str, Any]:
    broken = broken_runs(baseline, injected)
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for record in injected:
        found = op_and_layout(record)
        if found:
            totals[found] += 1
    cells: dict[tuple[str, str], int] = defaultdict(int)
    ops: dict[str, list[CaseResult]] = defaultdict(list)
    for record in broken:
        op, layout = op_and_layout(record)  # type: ignore[misc]
        cells[(op, layout)] += 1
        ops[op].append(record)
    per_op = []
    for op, runs in sorted(ops.items(), key=lambda item: (-len(item[1]), item[0])):
        stats = [r.injection_stats or InjectionStats() for r in runs]
        diagnoses = defaultdict(int)
        for r in runs:
            text = r.diagnosis or (f"{r.stage} {r.error.type}" if r.error else "no diagnosis")
            diagnoses[
                "narrowing"
                if text.startswith("precision narrowing")
                else "layout"
                if text.startswith("layout")
                else text[:80]
            ] += 1
        per_op.append(
            {
                "op": op,
                "broken_runs": len(runs),
                "layouts": sorted({op_and_layout(r)[1] for r in runs}, key=_LAYOUT_ORDER.index),  # type: ignore[index]
                "dtypes": sorted({r.dtype for r in runs}),
                "modes": sorted({r.mode for r in runs}),
                "non_dense_64bit_reached_kernel": any((s.non_dense_args or 0) > 0 for s in stats),
                "non_dense_args": sum(s.non_dense_args or 0 for s in stats),
                "converted_args": sum(s.converted_args or 0 for s in stats),
                # Arguments of one launch in one storage: converted one by one, a write through one misses the others.
                "aliased_args": sum(s.aliased_args or 0 for s in stats),
                # Emulations that count what they touched (faults, rewritten kernels, triton-ascend's classes).
                "hit_launches": sum(1 for s in stats for h in s.hits or () if not h.startswith("aten:")),
                # Fallback calls (ATen fallbacks, custom ops; hits named `aten:N:op`), counted apart from kernel launches.
                "hit_fallbacks": sum(1 for s in stats for h in s.hits or () if h.startswith("aten:")),
                "diagnoses": dict(diagnoses),
                "first": runs[0].run_id,
                "first_symptom": _symptom(runs[0]),
            }
        )
    fix_broken = broken_runs(baseline, fixed) if fixed is not None else None
    layouts = [l for l in _LAYOUT_ORDER if any(k[1] == l for k in totals)]
    return {
        "runs": len(injected),
        "baseline_runs": len(baseline),
        "baseline_failing": sum(str(r.status) in FAILING | {"xfail"} for r in baseline),
        "ops": len({k[0] for k in totals}),
        "broken_runs": len(broken),
        "broken_ops": len(ops),
        "missed_runs": sum(missed(r) for r in injected),
        "layouts": layouts,
        "table": {op: {l: [cells.get((op, l), 0), totals.get((op, l), 0)] for l in layouts} for op in ops},
        "per_layout": {
            l: [sum(cells.get((op, l), 0) for op in ops), sum(n for (o, ll), n in totals.items() if ll == l)]
            for l in layouts
        },
        "per_op": per_op,
        "fix_broken_runs": None if fix_broken is None else [r.run_id for r in fix_broken],
    }


def _symptom(record: CaseResult) -> str:
    if record.error is not None:
        return f"{record.stage} {record.error.type}: {record.error.message.strip().splitlines()[0][:160] if record.error.message.strip() else ''}"
    failing = [o for o in record.outputs if not o.passed]
    return failing[0].summary()[:200] if failing else str(record.status)


def markdown(result: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        f"# Blast radius of `{meta['inject']}` over the OpInfo sweep",
        "",
        f"Device `{meta['device']}`, sweep `{meta['sweep']}`{', -k ' + repr(meta['keyword']) if meta.get('keyword') else ''}"
        f"{', shard ' + meta['shard'] if meta.get('shard') else ''}, "
        f"torch {meta.get('torch', '?')}. {result['runs']} runs of {result['ops']} ops under the injection; "
        f"{result['baseline_failing']} runs already fail or are known failures without it (not counted).",
        "",
        f"**{result['broken_runs']} runs of {result['broken_ops']} ops broken by `{meta['inject']}`** "
        "(pass without the injection, fail with it)"
        + (
            f"; {result['missed_runs']} runs had nothing it applies to (`injection-missed`: for a launch-boundary "
            "conversion, no generated kernel launched; not counted)"
            if result.get("missed_runs")
            else ""
        )
        + ".",
        "",
    ]
    if meta.get("fix"):
        broken = result["fix_broken_runs"]
        lines += [
            f"**The fix `{meta['fix']}` breaks {len(broken)} runs**"
            + (": " + ", ".join(broken[:20]) if broken else "."),
            "",
        ]
    lines += ["## Per layout", "", "| layout | broken / runs |", "|---|---|"]
    lines += [f"| {l} | {b} / {n} |" for l, (b, n) in result["per_layout"].items()]
    # A launch-boundary conversion says which arguments it converted; other injections say which launches they hit.
    converts = any(e["converted_args"] for e in result["per_op"])
    if result["per_op"]:
        layouts = result["layouts"]
        last = "non-dense int64/float64 reached its kernel" if converts else "launches hit"
        lines += [
            "",
            "## Op x layout (broken runs / runs)",
            "",
            "| op | " + " | ".join(layouts) + f" | {last} |",
            "|---|" + "---|" * len(layouts) + "---|",
        ]
        for entry in result["per_op"]:
            row = result["table"][entry["op"]]
            cells = [(f"**{b}**/{n}" if b else (f"0/{n}" if n else "–")) for b, n in (row[l] for l in layouts)]
            reached = (
                ('yes' if entry['non_dense_64bit_reached_kernel'] else 'no') if converts else entry["hit_launches"]
            )
            lines.append(f"| `{entry['op']}` | " + " | ".join(cells) + f" | {reached} |")
        lines += ["", "## Broken ops, one line each", ""]
        for e in result["per_op"]:
            if not converts:
                diagnoses = ", ".join(f"{k}: {v}" for k, v in e["diagnoses"].items())
                lines.append(
                    f"- `{e['op']}`: {e['broken_runs']} runs ({', '.join(e['layouts'])}; "
                    f"{', '.join(e['dtypes'])}; {', '.join(e['modes'])}); {e['hit_launches']} launches hit; "
                    f"diagnosis: {diagnoses}; first: `{e['first']}`: {e['first_symptom']}"
                )
                continue
            diagnoses = ", ".join(f"{k}: {v}" for k, v in e["diagnoses"].items())
            lines.append(
                f"- `{e['op']}`: {e['broken_runs']} runs ({', '.join(e['layouts'])}; {', '.join(e['dtypes'])}; "
                f"{', '.join(e['modes'])}); non-dense int64/float64 argument reached its kernel: "
                f"**{'yes' if e['non_dense_64bit_reached_kernel'] else 'no'}** ({e['non_dense_args']} of "
                f"{e['converted_args']} converted arguments non-dense, {e['aliased_args']} sharing a storage "
                f"with another argument of their launch); diagnosis: {diagnoses}; first: "
                f"`{e['first']}`: {e['first_symptom']}"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--inject", default="boundary-downcast")
    parser.add_argument("--fix", default="boundary-downcast-strided", help="the fix to check ('' for none)")
    parser.add_argument("--full", action="store_true", help="the full sweep (default: the ci sample)")
    parser.add_argument("-k", dest="keyword", help="restrict the sweep (harness -k expression)")
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="the I-th of N equal parts of the sweep (harness run --shard): a uniform sample, or one host's part",
    )
    parser.add_argument("--out", default=os.path.join(ROOT, "reports", "blast-radius"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case run")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per sweep (harness run --workers)")
    parser.add_argument("--baseline", help="reuse a results file of the plain sweep")
    parser.add_argument("--bug", help="reuse a results file of the sweep under --inject")
    parser.add_argument("--fix-results", help="reuse a results file of the sweep under --fix")
    parser.add_argument("--verbose", action="store_true", help="show the harness's output")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    timings = {}
    paths = {}
    for label, inject, given in (
        ("baseline", None, args.baseline),
        (args.inject, args.inject, args.bug),
        (args.fix, args.fix, args.fix_results),
    ):
        if label == "" or label is None:
            continue
        path = given or os.path.join(args.out, f"results-{label}.json")
        if not given:
            timings[label] = round(run_sweep(args, inject, path), 1)
        paths[label] = path
    meta_run, baseline = read_results(paths["baseline"])
    _, injected = read_results(paths[args.inject])
    fixed = read_results(paths[args.fix])[1] if args.fix else None
    result = analyse(baseline, injected, fixed)
    meta = {
        "inject": args.inject,
        "fix": args.fix or None,
        "device": args.device,
        "keyword": args.keyword,
        "shard": args.shard,
        "sweep": "full" if args.full else "ci",
        "torch": (meta_run.get("versions") or {}).get("torch"),
        "wall_s": timings,
        "results": paths,
    }
    with open(os.path.join(args.out, "blast_radius.json"), "w", encoding="utf-8") as handle:
        json.dump({"meta": meta, **result}, handle, indent=1)
    text = markdown(result, meta)
    with open(os.path.join(args.out, "blast_radius.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    print(f"written: {os.path.join(args.out, 'blast_radius.md')}, {os.path.join(args.out, 'blast_radius.json')}")
    return 1 if result["fix_broken_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())
