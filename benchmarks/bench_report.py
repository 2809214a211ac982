"""Time the HTML report for a night's worth of records (target: 1,000 records in under 5 s).

    python benchmarks/bench_report.py [--records 1000] [--repeat 3] [-o /tmp/report.html]

The records are synthetic but shaped like real ones: ~5% failing with full
mismatch maps, error histograms, samples and a bisected kernel; a few errors
with tracebacks, skips, xfails; the rest passing with several outputs each.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness.records import (  # noqa: E402
    CaseResult,
    ErrorHistogram,
    ErrorInfo,
    KernelArgument,
    Localization,
    MismatchMap,
    OutputComparison,
    Sample,
)
from harness.report import render_html  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")
MODES = ("inference", "training")
VERSIONS = {"torch": "2.13.0", "triton": "3.6.0", "python": "3.12.7"}
KERNEL_SOURCE = '''
@triton.jit
def triton_red_fused__softmax_{n}(in_ptr0, in_ptr1, out_ptr0, out_ptr1, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xnumel = {rows}
    rnumel = {cols}
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rbase = tl.arange(0, RBLOCK)[None, :]
    x0 = xindex
    _tmp2 = tl.full([XBLOCK, RBLOCK], float("-inf"), tl.float32)
    for roffset in range(0, rnumel, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < rnumel
        r1 = rindex
        tmp0 = tl.load(in_ptr0 + (r1 + {cols}*x0), rmask & xmask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, RBLOCK])
        tmp3 = triton_helpers.maximum(_tmp2, tmp1)
        _tmp2 = tl.where(rmask & xmask, tmp3, _tmp2)
    tmp2 = triton_helpers.max2(_tmp2, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp2, xmask)
    for roffset in range(0, rnumel, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < rnumel
        r1 = rindex
        tmp4 = tl.load(in_ptr0 + (r1 + {cols}*x0), rmask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp5 = tl.load(in_ptr1 + (r1), rmask, eviction_policy='evict_last', other=0.0)
        tmp6 = tmp4 - tmp2
        tmp7 = tl_math.exp(tmp6) * tmp5
        tl.store(out_ptr1 + (r1 + {cols}*x0), tmp7, rmask & xmask)
'''.strip("\n")


def _passing_output(rng: random.Random, name: str, dtype: str) -> OutputComparison:
    shape = [rng.choice((8, 32, 128)), rng.choice((64, 256, 1024))]
    numel = shape[0] * shape[1]
    max_abs = rng.uniform(1e-7, 1e-4)
    return OutputComparison(
        name=name,
        dtype=dtype,
        shape=shape,
        numel=numel,
        bad=0,
        bad_pct=0.0,
        max_abs=max_abs,
        max_rel=max_abs * rng.uniform(1, 50),
        passed=True,
        rule="tolerance",
        rtol=1.3e-6,
        atol=1e-5,
        cosine=1 - rng.uniform(0, 1e-7),
        actual_max=rng.uniform(1, 10),
        expected_max=rng.uniform(1, 10),
    )


def _mismatch_map(rng: random.Random, rows: int, cols: int) -> tuple[MismatchMap, int]:
    cell_rows, cell_cols = max(1, -(-rows // 64)), max(1, -(-cols // 64))
    grid_rows, grid_cols = -(-rows // cell_rows), -(-cols // cell_cols)
    # Mismatches cluster in real failures (a tail block, a bad row range): make a band.
    band = (rng.randrange(grid_rows), rng.randrange(grid_cols))
    counts = []
    for i in range(grid_rows):
        line = []
        for j in range(grid_cols):
            near = abs(i - band[0]) < grid_rows // 4 + 1 or j >= band[1]
            line.append(rng.randrange(cell_rows * cell_cols + 1) if near and rng.random() < 0.7 else 0)
        counts.append(line)
    return MismatchMap(rows, cols, cell_rows, cell_cols, counts), sum(map(sum, counts))


def _failing_output(rng: random.Random, name: str, dtype: str) -> OutputComparison:
    rows, cols = rng.choice(((4096, 512), (128, 4096), (1, 65536), (2048, 50257)))
    mismatch, bad = _mismatch_map(rng, rows, cols)
    numel = rows * cols
    low = rng.randrange(-9, -5)
    edges = [10.0**e for e in range(low, 2)]
    counts = [int(numel * rng.random() / (2 * len(edges))) for _ in edges[:-1]]
    samples = [
        Sample(index=[rng.randrange(rows), rng.randrange(cols)], actual=rng.uniform(-3, 3), expected=rng.uniform(-3, 3))
        for _ in range(8)
    ]
    return OutputComparison(
        name=name,
        dtype=dtype,
        shape=[rows, cols],
        numel=numel,
        bad=bad,
        bad_pct=100 * bad / numel,
        max_abs=rng.uniform(0.01, 8),
        max_rel=rng.uniform(0.1, 1e3),
        passed=False,
        rule="tolerance",
        rtol=1.6e-2,
        atol=1e-5,
        max_abs_index=[3, 17],
        max_rel_index=[0, 5],
        actual_max=4.2,
        expected_max=3.9,
        cosine=rng.uniform(0.9, 0.9999),
        samples=samples,
        mismatch_map=mismatch,
        error_histogram=ErrorHistogram(edges=edges, counts=counts, zero=numel - sum(counts)),
        layout_notes=["stride (1, 4096) != (4096, 1)"] if rng.random() < 0.2 else [],
    )


def _kernel(rng: random.Random, n: int) -> Localization:
    rows, cols = 4096, 512
    return Localization(
        answer="kernel",
        diverged=True,
        graph=rng.choice(("forward 0", "backward 0")),
        launch_index=rng.randrange(40),
        launches=40,
        name=f"triton_red_fused__softmax_{n}",
        kind="triton",
        source=KERNEL_SOURCE.format(n=n, rows=rows, cols=cols),
        nodes=["amax", "sub", "exp", "mul"],
        aten_ops=["aten.amax.default", "aten.sub.Tensor", "aten.exp.default", "aten.mul.Tensor"],
        args=[
            KernelArgument("in_ptr0", "buf3", "in", "float16", [rows, cols], [cols, 1], 0),
            KernelArgument("in_ptr1", "arg2_1", "in", "float16", [cols], [1], 0),
            KernelArgument("out_ptr0", "buf4", "out", "float32", [rows], [1], 0),
            KernelArgument("out_ptr1", "buf5", "out", "float16", [rows, cols], [cols, 1], 0),
        ],
        isolated=rng.choice(
            ("kernel is wrong: on eager values of its inputs it still diverges", "upstream drift amplified here")
        ),
        metrics=_failing_output(rng, "out_ptr1", "float16"),
        buffers=["out_ptr1"],
        stage="inductor",
    )


def synthetic_records(count: int, seed: int = 0) -> list[CaseResult]:
    rng = random.Random(seed)
    records = []
    for n in range(count):
        dtype, mode = rng.choice(DTYPES), rng.choice(MODES)
        record = CaseResult(
            case=f"suite_{n % 17}.case_{n}",
            device="cuda:0",
            backend="inductor",
            dtype=dtype,
            mode=mode,
            status="pass",
            duration_s=rng.uniform(0.2, 20),
            versions=dict(VERSIONS),
            command=f"python -m harness run cases/suite_{n % 17}.py -k case_{n} --dtype {dtype} --mode {mode}",
        )
        draw = rng.random()
        if draw < 0.05:
            record.status = "fail"
            record.stage, record.symptom = "compare", "divergence"
            record.outputs = [_failing_output(rng, "out0", dtype), _passing_output(rng, "out1", dtype)]
            record.first_divergent_kernel = _kernel(rng, n)
        elif draw < 0.07:
            record.status, record.stage, record.symptom = "error", "compile", "crash"
            record.error = ErrorInfo(
                "torch._dynamo.exc.BackendCompilerFailed",
                f"backend='inductor' raised:\nAssertionError: case {n}",
                "Traceback (most recent call last):\n"
                + '  File "harness/run/case.py", line 88, in run\n    compiled(*inputs)\n' * 20,
            )
        elif draw < 0.12:
            record.status, record.reason = "skip", "needs a GPU with bf16 support"
        elif draw < 0.14:
            record.status, record.reason, record.issue = "xfail", "known softmax drift", "pytorch/pytorch#123456"
            record.outputs = [_failing_output(rng, "out0", dtype)]
        else:
            record.outputs = [_passing_output(rng, f"out{i}", dtype) for i in range(rng.randrange(1, 4))]
        records.append(record)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("-o", "--output", help="also write the page here, to look at it")
    args = parser.parse_args()
    records = synthetic_records(args.records)
    baseline = synthetic_records(args.records, seed=1)
    run_meta = {
        "started_at": "2026-11-30T01:00:00+00:00",
        "duration_s": 5400.0,
        "device": "cuda:0",
        "backend": "inductor",
        "versions": VERSIONS,
        "command": "python -m harness run cases/",
    }
    # The first render compiles the templates; nightly reports pay that once too, so it counts.
    timings, html = [], ""
    for _ in range(args.repeat):
        start = time.perf_counter()
        html = render_html(records, run_meta, baseline)
        timings.append(time.perf_counter() - start)
    failing = sum(r.status == "fail" for r in records)
    print(f"rendered {len(records)} records ({failing} failing with maps/histograms/kernels) + baseline diff")
    print(
        f"render time: first {timings[0]:.3f} s, best {min(timings):.3f} s over {args.repeat} runs; page {len(html) / 1e6:.2f} MB"
    )
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(html)
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
