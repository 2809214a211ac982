"""What one case, one process costs: a selection run with `--isolation case` against `--isolation module`, and
against another checkout's harness (the pooled workers it had), all in this one run.

    python benchmarks/bench_isolation.py [--tag correct] [--mode inference] [--dtype float32] [--workers 2]
        [--against DIR] [--repeats N] [--json out.json]

Every side runs `python -m harness run <selection> --workers N` as a whole process, with one Inductor cache
directory warmed first by a run of the selection (a nightly host's second night), so the sides differ only in
how cases are isolated (a case process compiles into caches of its own, `inductor_compat.compile_caches`: warm
shared caches serve only the other checkout, where it shared them). `--against DIR` runs the same command with DIR's `harness` package first on the path
(a checkout of an earlier commit, `git worktree add /tmp/before <commit>`: it runs there, with its own cases). The figure is each side's wall time
and its ratio to the pooled or module side; the records' statuses are compared too (they must not differ).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_side(label: str, selection: list[str], env: dict[str, str], extra: list[str], cwd: Path = REPO) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-isolation-")) / "results.json"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", *selection, *extra, "--json", str(out), "-q"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    records = json.loads(out.read_text())["records"] if out.exists() else []
    statuses = {f"{r['case']}[{r['dtype']}-{r['mode']}]": r["status"] for r in records}
    print(f"{label:>28}: {wall:7.1f} s, {len(records)} runs, exit {done.returncode}", flush=True)
    return {
        "label": label,
        "wall_s": round(wall, 2),
        "runs": len(records),
        "statuses": statuses,
        "exit": done.returncode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tag", default="correct")
    parser.add_argument("--mode", action="append")
    parser.add_argument("--dtype", action="append")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--against", metavar="DIR", help="another checkout whose harness runs the same selection")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side, in turn (median reported)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    selection = ["--tag", args.tag, "--workers", str(args.workers)]
    selection += [f"--mode={m}" for m in args.mode or []] + [f"--dtype={d}" for d in args.dtype or []]
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="bench-isolation-cache-"))
    run_side("warm-up (caches)", selection, env, ["--isolation", "module"])
    # (label, env, extra arguments, working directory) per side; run in turn, `--repeats` times, so that a
    # machine's drift over the run is spread over every side alike; each side's figure is its median.
    plans = [
        ("--isolation case", env, ["--isolation", "case"], REPO),
        ("--isolation module", env, ["--isolation", "module"], REPO),
    ]
    if args.against:
        against = Path(args.against).resolve()
        before = dict(env, PYTHONPATH=os.pathsep.join([str(against), env.get("PYTHONPATH", "")]))
        plans.append((f"{against.name} (other checkout)", before, [], against))
    measured: dict[str, list[dict]] = {label: [] for label, *_ in plans}
    for _ in range(args.repeats):
        for label, side_env, extra, cwd in plans:
            measured[label].append(run_side(label, selection, side_env, extra, cwd=cwd))
    sides = []
    for label, runs in measured.items():
        walls = sorted(r["wall_s"] for r in runs)
        sides.append({**runs[0], "wall_s": walls[len(walls) // 2], "walls_s": walls})
    base = sides[-1]
    for side in sides:
        side["ratio"] = round(side["wall_s"] / base["wall_s"], 3)
        differing = sorted(k for k in side["statuses"] if side["statuses"][k] != base["statuses"].get(k))
        side["statuses_differing"] = differing
        print(
            f"{side['label']:>28}: {side['ratio']:.2f}x of {base['label']}; statuses that differ: "
            f"{', '.join(differing) or 'none'}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(), "sides": sides},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
