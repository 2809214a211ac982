"""The HTML report: built from hand-made records, rendered, and checked for what people read."""

from __future__ import annotations

import html as html_lib
import os
import re
import struct
import subprocess
import sys
import zlib

import pytest

from harness.records import (
    CaseResult,
    Localization,
    ErrorHistogram,
    ErrorInfo,
    MismatchMap,
    OutputComparison,
    Sample,
    Status,
    read_results,
    write_results,
)
from harness.report import merge_run_meta, render_html, write_report
from harness.report.baseline import diff_against_baseline
from harness.report.svg import error_histogram_svg, mismatch_map_svg
from harness.report.view import highlight_source, marked_arguments

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = "/usr/bin/chromium"
EMULATION = "ascend-910b-fp16-accum"
HOSTILE_CASE = "<script>alert(1)</script>"
HOSTILE_MESSAGE = "<img src=x onerror=alert(1)> went wrong"
# Runs only if escaping fails; leaves an element the dumped DOM would show.
DOM_PAYLOAD = '<script>document.body.appendChild(document.createElement("pwned-marker"))</script>'

KERNEL_SOURCE = """\
@triton.jit
def triton_poi_fused_softmax_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + (xindex), xmask)
    tmp1 = tl.load(in_ptr1 + (xindex % 64), xmask)
    tmp2 = tl_math.exp(tmp0 - tmp1)
    tl.store(out_ptr0 + (xindex), tmp2, xmask)  # </code></pre><script>alert("kernel")</script>
"""


def passing_output(name: str = "out0", max_abs: float = 1.5e-6, **overrides) -> OutputComparison:
    fields = dict(
        name=name,
        dtype="float32",
        shape=[4, 8],
        numel=32,
        bad=0,
        bad_pct=0.0,
        max_abs=max_abs,
        max_rel=2e-6,
        passed=True,
        rule="tolerance",
        rtol=1.3e-6,
        atol=1e-5,
        cosine=0.9999999,
    )
    fields.update(overrides)
    return OutputComparison(**fields)


def failing_output() -> OutputComparison:
    counts = [[0] * 8 for _ in range(8)]
    counts[2][5] = 1  # a single bad element among 64 in its cell
    counts[7] = [64] * 8  # the last row band entirely wrong
    return OutputComparison(
        name="out0",
        dtype="float16",
        shape=[2, 32, 64],
        numel=4096,
        bad=513,
        bad_pct=12.52,
        max_abs=0.3125,
        max_rel=41.5,
        passed=False,
        rule="tolerance",
        rtol=1e-3,
        atol=1e-5,
        max_abs_index=[1, 30, 7],
        max_rel_index=[1, 31, 2],
        actual_max=7.25,
        expected_max=6.9375,
        cosine=0.987654,
        nan_mismatch=2,
        layout_notes=["stride (1, 64) != (64, 1)"],
        samples=[Sample([0, 5, 40], 1.4375, 1.25), Sample([1, 30, 7], -0.0625, 0.25)],
        mismatch_map=MismatchMap(rows=64, cols=64, cell_rows=8, cell_cols=8, counts=counts),
        error_histogram=ErrorHistogram(
            edges=[1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0], counts=[7, 30, 400, 90, 12, 3], zero=3554
        ),
    )


def divergent_kernel() -> Localization:
    return Localization.from_dict(
        {
            "answer": "kernel",
            "diverged": True,
            "graph": "forward 0",
            "launch_index": 3,
            "launches": 7,
            "name": "triton_poi_fused_softmax_0",
            "source": KERNEL_SOURCE,
            "nodes": ["sub_1", "exp_2"],
            "aten_ops": ["aten.sub.Tensor", "aten.exp.default"],
            "args": [
                {
                    "name": "in_ptr0",
                    "buffer": "arg0_1",
                    "dtype": "float16",
                    "size": [2, 32, 64],
                    "stride": [2048, 64, 1],
                    "storage_offset": 0,
                    "role": "in",
                },
                {
                    "name": "in_ptr1",
                    "buffer": "arg1_1",
                    "dtype": "float16",
                    "size": [64],
                    "stride": [1],
                    "storage_offset": 0,
                    "role": "in",
                },
                {
                    "name": "out_ptr0",
                    "buffer": "buf3",
                    "dtype": "float16",
                    "size": [2, 32, 64],
                    "stride": [2048, 1, 32],
                    "storage_offset": 128,
                    "role": "out",
                },
            ],
            "isolated": "kernel is wrong on reference inputs",
            "metrics": {
                "name": "buf3",
                "dtype": "float16",
                "shape": [2, 32, 64],
                "numel": 4096,
                "bad": 499,
                "bad_pct": 12.2,
                "max_abs": 0.3125,
                "max_rel": 40.0,
                "passed": False,
                "rule": "tolerance",
                "cosine": 0.98801,
            },
            "buffers": ["out_ptr0"],
            "stage": "inductor",
        }
    )


def record(case: str, status: str, **fields) -> CaseResult:
    defaults = dict(
        device="cpu",
        backend="inductor",
        dtype="float32",
        mode="inference",
        duration_s=0.5,
        versions={"torch": "2.13.0", "python": "3.12.7"},
    )
    defaults.update(fields)
    return CaseResult(case=case, status=status, **defaults)


def sample_records() -> list[CaseResult]:
    return [
        record("ops.add", "pass", outputs=[passing_output()]),
        record("ops.mul", "pass", outputs=[passing_output(max_abs=2.5e-6)]),
        record(
            "ops.softmax",
            "fail",
            dtype="float16",
            mode="training",
            stage="compare",
            symptom="divergence",
            outputs=[failing_output(), passing_output("out1")],
            first_divergent_kernel=divergent_kernel(),
            command="python -m harness run cases/ops.py -k softmax --dtype float16 --mode training",
        ),
        record(
            "ops.scatter",
            "error",
            stage="compile",
            symptom="crash",
            error=ErrorInfo(
                "BackendCompilerFailed",
                "backend='inductor' raised:\nLoweringException: scatter_reduce",
                'Traceback (most recent call last):\n  File "runner.py", line 12, in run\nLoweringException: scatter_reduce',
            ),
        ),
        record("ops.fft", "skip", reason="needs cuFFT, not on this device"),
        record("ops.matmul", "fail", emulation=EMULATION, outputs=[failing_output()]),
        record(HOSTILE_CASE, "error", error=ErrorInfo("ValueError", HOSTILE_MESSAGE, "Traceback:\n" + HOSTILE_MESSAGE)),
    ]


RUN_META = {
    "started_at": "2026-11-30T01:00:00+00:00",
    "duration_s": 754.0,
    "device": "cpu",
    "backend": "inductor",
    "versions": {"torch": "2.13.0", "triton": "3.6.0"},
    "command": "python -m harness run cases/ --report-dir reports",
}


@pytest.fixture(scope="module")
def page() -> str:
    return render_html(sample_records(), RUN_META)


def section(page: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.S)
    assert match, f"section {section_id} missing"
    return match.group(1)


def detail(page: str, run_id: str) -> str:
    """A case's details block, whole: the <details> it nests (passed outputs, further figures) included."""
    for start in (m.start() for m in re.finditer(r'<details class="case', page)):
        depth, position = 0, start
        for tag in re.finditer(r"<(/?)details\b", page[start:]):
            depth += -1 if tag.group(1) else 1
            if depth == 0:
                position = start + tag.end()
                break
        block = page[start:position]
        if html_lib.escape(run_id, quote=False) in block:
            return block
    raise AssertionError(f"no details block for {run_id}")


def text_of(fragment: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment))


def test_summary_shows_counts_devices_versions_and_run_time(page):
    summary = section(page, "summary")
    tiles = dict(re.findall(r'data-status="(\w+)"><div class="n">(\d+)</div>', summary))
    assert tiles == {
        "fail": "2",
        "error": "2",
        "xpass": "0",
        "nondeterministic": "0",
        "xfail": "0",
        "skip": "1",
        "pass": "2",
    }
    text = " ".join(text_of(summary).split())
    for expected in (
        "cpu",
        "inductor",
        "torch 2.13.0",
        "triton 3.6.0",
        "python 3.12.7",
        "12m 34s",
        "2026-11-30T01:00:00+00:00",
        "python -m harness run cases/ --report-dir reports",
    ):
        assert expected in text
    assert "4 failing" in text_of(page)


def test_table_lists_every_run_failures_first(page):
    table = re.search(r'<table class="grid sortable" id="case-table">(.*?)</table>', page, re.S).group(1)
    statuses = re.findall(r'<tr class="row-\w+" data-status="(\w+)"', table)
    assert statuses == ["fail", "fail", "error", "error", "skip", "pass", "pass"]
    softmax_row = next(row for row in re.findall(r"<tr class.*?</tr>", table, re.S) if "ops.softmax" in row)
    cells = [" ".join(text_of(c).split()) for c in re.findall(r"<td.*?</td>", softmax_row, re.S)]
    assert cells[0] == "fail"
    assert cells[3] == "513 / 4128"  # bad over both outputs
    assert cells[4:7] == ["0.3125", "41.5", "0.987654"]
    assert cells[7] == "kernel: triton_poi_fused_softmax_0 (forward 0 #3)"
    assert 'href="#case-2"' in softmax_row


def test_failure_details_show_metrics_pictures_samples_and_command(page):
    block = detail(page, "ops.softmax[float16-training]")
    text = " ".join(text_of(block).split())
    for expected in (
        "513 / 4096 (12.5%)",
        "@(1, 30, 7)",
        "7.25 / 6.938",
        "2 NaN mismatches",
        "stride (1, 64) != (64, 1)",
        "stage: compare",
        "symptom: divergence",
    ):
        assert expected in text, expected
    assert "python -m harness run cases/ops.py -k softmax --dtype float16 --mode training" in text
    # Mismatch map: one path per colour level; the single bad cell and the full band differ in colour.
    heat_map = re.search(r'<svg[^>]*class="mismatch-map".*?</svg>', block, re.S).group(0)
    fills = set(re.findall(r'<path fill="(#[0-9a-f]{6})"', heat_map))
    assert len(fills) == 2
    histogram = re.search(r'<svg[^>]*class="error-histogram".*?</svg>', block, re.S).group(0)
    assert histogram.count("<rect") >= 7  # six decades and the exact-match bar
    assert "[1e-4, 1e-3): 400 elements" in histogram and "exact match: 3554 elements" in histogram
    assert "atol" in histogram
    assert "1.4375" in text and "-0.0625" in text


def test_kernel_section_highlights_lines_naming_the_diverging_buffer(page):
    block = detail(page, "ops.softmax[float16-training]")
    lines = re.findall(r'<span class="line( hit)?" data-n="(\d+)">(.*?)</span>\n', block)
    hits = {int(n) for hit, n, _ in lines if hit}
    expected = {n for n, line in enumerate(KERNEL_SOURCE.splitlines(), 1) if "out_ptr0" in line}
    assert hits == expected == {2, 8}
    assert "<mark>out_ptr0</mark>" in block
    text = " ".join(text_of(block).split())
    for expected in (
        "kernel is wrong on reference inputs",
        "forward 0",
        "launch 3 of 7",
        "sub_1",
        "exp_2",
        "aten.exp.default",
        "(2048, 1, 32)",
        "bad 499 / 4096",
    ):
        assert expected in text, expected
    assert re.search(r'<tr class="buffer-hit"><td class="mono">out_ptr0</td>', block)
    assert '<script>alert("kernel")' not in block and "&lt;script&gt;alert(&#34;kernel&#34;)" in block


def test_highlight_source_matches_whole_identifiers_only():
    lines = highlight_source("a = in_ptr1\nb = in_ptr10\nc = xin_ptr1", ["in_ptr1"])
    assert [line.hit for line in lines] == [True, False, False]
    assert lines[0].pieces == [("a = ", False), ("in_ptr1", True)]


def test_errors_show_traceback_and_skips_their_reason(page):
    errors = text_of(section(page, "errors"))
    assert "BackendCompilerFailed: backend='inductor' raised:\nLoweringException: scatter_reduce" in errors
    assert 'File "runner.py", line 12, in run' in errors
    skips = " ".join(text_of(section(page, "skips")).split())
    assert "ops.fft[float32-inference]" in skips and "needs cuFFT, not on this device" in skips


def test_emulation_label_is_prominent_wherever_the_record_appears(page):
    label = f"emulation: {EMULATION}"
    assert re.search(r'<div class="emulation-banner" id="emulation-banner">' + re.escape(label), page)
    assert label in text_of(section(page, "summary"))
    row = next(r for r in re.findall(r"<tr class.*?</tr>", section(page, "cases"), re.S) if "ops.matmul" in r)
    assert label in row
    assert label in detail(page, "ops.matmul[float32-inference]")
    assert label in re.search(r"<title>(.*?)</title>", page).group(1)
    # No other record claims to be an emulation.
    assert text_of(section(page, "cases")).count(label) == 1


def test_a_surrogate_devices_runs_say_so_wherever_they_appear():
    label = "surrogate NPU (CPU-backed), not an NPU result"
    records = [
        record("ops.add", "pass", device="npu", surrogate=label, outputs=[passing_output()]),
        record(
            "ops.mul",
            "fail",
            device="npu",
            surrogate=label,
            npu_backend="triton_experimental",
            npu_backend_loaded="triton_experimental",
            outputs=[failing_output()],
        ),
    ]
    html = render_html(records, {**RUN_META, "device": "npu", "surrogate": label})
    assert re.search(r'<div class="emulation-banner" id="surrogate-banner">' + re.escape(label), html)
    assert label in text_of(section(html, "summary"))
    rows = re.findall(r"<tr class.*?</tr>", section(html, "cases"), re.S)
    assert len(rows) == 2 and all(label in row for row in rows)
    failing = detail(html, "ops.mul[float32-inference]")
    assert label in failing and "<b>npu backend:</b> triton_experimental" in failing
    # A run on the device itself says nothing of the kind.
    assert label not in render_html(sample_records(), RUN_META)


def test_untrusted_text_renders_as_text_not_markup(page):
    assert HOSTILE_CASE not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt; went wrong" in page
    # The only script is the sort script, allowed by hash in the page's CSP.
    assert page.count("<script") == 1
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+'", page)


def test_page_is_self_contained(page):
    assert not re.search(r'(src|href)="(?!#)', page)
    assert (
        "url(" not in page
        and "@import" not in page
        and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )


def test_baseline_diff_finds_new_failure_fix_and_moved_metric():
    baseline = [
        record("ops.add", "fail", outputs=[passing_output(bad=3, passed=False)]),
        record("ops.mul", "pass", outputs=[passing_output(max_abs=2.5e-4)]),
        record(
            "ops.softmax", "pass", dtype="float16", mode="training", outputs=[passing_output(), passing_output("out1")]
        ),
        record("ops.gone", "pass"),
    ]
    current = sample_records()
    diff = diff_against_baseline(current, baseline)
    assert [c.record.case for c in diff.new_failures] == ["ops.softmax", "ops.scatter", "ops.matmul", HOSTILE_CASE]
    assert diff.new_failures[0].before == "pass" and diff.new_failures[1].baseline is None
    assert [c.record.case for c in diff.fixes] == ["ops.add"]
    moved = {(m.current.case, m.metric) for m in diff.moved}
    assert ("ops.mul", "max_abs") in moved
    assert not any(case == "ops.softmax" for case, _ in moved)  # a new failure is listed as one, not per metric
    assert ("ops.add", "max_abs") not in moved  # same error, only the verdict changed
    mul = next(m for m in diff.moved if m.current.case == "ops.mul")
    assert not mul.worse and mul.factor == pytest.approx(0.01)
    assert [r.case for r in diff.only_in_baseline] == ["ops.gone"]

    page = render_html(current, RUN_META, baseline)
    text = " ".join(text_of(section(page, "baseline")).split())
    assert "4 new failures" in text and "1 fixed" in text
    new_failures = " ".join(text_of(re.search(r'id="new-failures">(.*?)</div>', page, re.S).group(1)).split())
    assert "ops.softmax[float16-training]" in new_failures and "pass → fail" in new_failures
    fixes = " ".join(text_of(re.search(r'id="fixes">(.*?)</div>', page, re.S).group(1)).split())
    assert "ops.add[float32-inference]" in fixes and "fail → pass" in fixes
    moved_html = " ".join(text_of(re.search(r'id="moved">(.*?)</div>', page, re.S).group(1)).split())
    assert "ops.mul[float32-inference] out0 max_abs 0.00025 2.5e-06 better ×0.01" in moved_html
    assert "ops.gone" in text


def test_nonfinite_and_missing_metrics_render():
    broken = failing_output()
    broken.max_abs, broken.cosine, broken.error_histogram = float("nan"), None, None
    page = render_html(
        [
            record(
                "ops.nan",
                "fail",
                outputs=[broken],
                first_divergent_kernel=Localization(answer="none", diverged=False, launches=4),
            )
        ]
    )
    row = re.search(r'<tr class="row-fail".*?</tr>', page, re.S).group(0)
    assert ">nan<" in row
    assert "No kernel output diverged across 4 launches" in page
    assert 'class="error-histogram"' not in page


def test_svg_pictures_handle_edge_cases():
    assert mismatch_map_svg(None) == "" and error_histogram_svg(None) == ""
    assert error_histogram_svg(ErrorHistogram(edges=[], counts=[], zero=0)) == ""
    only_exact = error_histogram_svg(ErrorHistogram(edges=[], counts=[], zero=10))
    assert "exact match: 10 elements" in only_exact
    # Ragged last cell: 10 rows pooled 4 at a time leaves a 2-row cell, fully bad at 2 counts.
    strip = mismatch_map_svg(MismatchMap(rows=10, cols=1, cell_rows=4, cell_cols=1, counts=[[0], [0], [2]]), "x<y")
    assert strip.count("<path") == 1 and 'fill="#4a0015"' in strip
    assert "x&lt;y" in strip


def test_merge_run_meta_spans_shards():
    merged = merge_run_meta(
        [
            {
                "started_at": "2026-11-30T01:10:00+00:00",
                "duration_s": 600.0,
                "device": "cuda:0",
                "versions": {"torch": "2.13.0"},
                "backend": "inductor",
            },
            {
                "started_at": "2026-11-30T01:00:00+00:00",
                "duration_s": 300.0,
                "device": "cuda:1",
                "versions": {"torch": "2.13.0", "triton": "3.6.0"},
                "backend": "inductor",
            },
        ]
    )
    assert merged["started_at"] == "2026-11-30T01:00:00+00:00"
    assert merged["duration_s"] == 1200.0  # 01:00 to 01:20
    assert merged["shard_time_s"] == 900.0
    assert merged["device"] == ["cuda:0", "cuda:1"] and merged["backend"] == "inductor"
    assert merged["versions"] == {"torch": "2.13.0", "triton": "3.6.0"}
    assert merge_run_meta([{"duration_s": 5.0}, {"duration_s": 7.0}])["duration_s"] == 7.0


def test_write_report_merges_shards_and_diffs_baseline(tmp_path):
    records = sample_records()
    shard_a, shard_b, base = tmp_path / "gw0.json", tmp_path / "gw1.json", tmp_path / "baseline.json"
    write_results(shard_a, records[:3], {**RUN_META, "started_at": "2026-11-30T01:05:00+00:00"})
    write_results(shard_b, records[3:], RUN_META)
    write_results(base, [record("ops.add", "fail")], {})
    output = tmp_path / "out" / "index.html"
    assert write_report([str(shard_a), str(shard_b)], str(output), str(base)) == str(output)
    page = output.read_text(encoding="utf-8")
    summary = section(page, "summary")
    assert re.findall(r'data-status="(\w+)"><div class="n">(\d+)</div>', summary)[0] == ("fail", "2")
    assert "2026-11-30T01:00:00+00:00" in summary and "results_files" in summary
    assert "baseline.json" in section(page, "baseline")
    assert "ops.add[float32-inference]" in re.search(r'id="fixes">(.*?)</div>', page, re.S).group(1)
    with pytest.raises(ValueError):
        write_report([], str(output))


def test_report_renders_without_torch(tmp_path):
    path = tmp_path / "r.json"
    write_results(path, sample_records(), RUN_META)
    script = (
        "import sys\n"
        "sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError
        "from harness.report import write_report\n"
        f"write_report([{str(path)!r}], {str(tmp_path / 'r.html')!r})\n"
        "assert 'torch' not in [m.split('.')[0] for m, v in sys.modules.items() if v is not None]\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True)
    assert (tmp_path / "r.html").stat().st_size > 10_000


# --- headless Chromium ---------------------------------------------------------------


def read_png(path: str) -> tuple[int, int, int, bytes]:
    """(width, height, channels, raw pixels) of an 8-bit RGB/RGBA non-interlaced PNG."""
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, idat, header = 8, [], None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        position += 12 + length
    width, height, depth, color_type, _, _, interlace = header
    assert depth == 8 and color_type in (2, 6) and interlace == 0, header
    channels = 3 if color_type == 2 else 4
    return width, height, channels, _unfilter(zlib.decompress(b"".join(idat)), width, height, channels)


def _unfilter(raw: bytes, width: int, height: int, bpp: int) -> bytes:
    stride = width * bpp
    previous, rows = bytearray(stride), []
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous))
        elif kind in (1, 3, 4):
            for x in range(stride):
                left = line[x - bpp] if x >= bpp else 0
                up, corner = previous[x], previous[x - bpp] if x >= bpp else 0
                if kind == 1:
                    line[x] = (line[x] + left) & 0xFF
                elif kind == 3:
                    line[x] = (line[x] + ((left + up) >> 1)) & 0xFF
                else:
                    p = left + up - corner
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                    predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                    line[x] = (line[x] + predictor) & 0xFF
        rows.append(bytes(line))
        previous = line
    return b"".join(rows)


def count_color(pixels: bytes, channels: int, rgb: str) -> int:
    target = bytes.fromhex(rgb.lstrip("#"))
    return sum(1 for i in range(0, len(pixels), channels) if pixels[i : i + 3] == target)


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    result = subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"chromium failed ({result.returncode}):\n{result.stderr[-2000:]}"
    return result


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} not installed (Debian package `chromium`)")
def test_page_in_headless_chromium(tmp_path):
    records = sample_records() + [record(DOM_PAYLOAD, "fail", outputs=[failing_output()], reason=DOM_PAYLOAD)]
    page_path = tmp_path / "index.html"
    page_path.write_text(render_html(records, RUN_META), encoding="utf-8")
    url = page_path.as_uri()

    dom = chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", url).stdout
    assert '<section id="summary">' in dom and 'id="case-table"' in dom and 'id="emulation-banner"' in dom
    assert 'class="mismatch-map"' in dom and 'class="error-histogram"' in dom and 'class="line hit"' in dom
    assert 'title="Click to sort"' in dom, "the sort script did not run (CSP hash mismatch?)"
    assert "<pwned-marker" not in dom and "<script>alert(1)" not in dom
    assert dom.count("<script") == 1

    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,900", "--hide-scrollbars", url)
    width, height, channels, pixels = read_png(str(shot))
    assert (width, height) == (1280, 900)
    header_band = pixels[: width * channels * 40]
    assert count_color(header_band, channels, "#17212b") > width * 20, "dark page header not visible"
    assert count_color(pixels, channels, "#f3e5f5") > 5_000, "emulation banner not visible"
    assert count_color(pixels, channels, "#fdecea") > 3_000, "red 'fail' tile not visible"
    colors = {pixels[i : i + 3] for i in range(0, len(pixels), channels * 97)}
    assert len(colors) > 20, "screenshot looks blank"


def test_results_file_from_disk_renders():
    # Written by hand as the runner writes it: NaN/Infinity, a 1-row map, a partial
    # kernel dict and a field from a newer harness must all still render.
    run_meta, records = read_results(os.path.join(REPO, "tests", "fixtures", "report_results.json"))
    page = render_html(records, run_meta)
    block = detail(page, "ops.layer_norm[bfloat16-inference]")
    assert 'class="mismatch-map"' in block and 'class="error-histogram"' in block
    assert re.search(r'<span class="line hit" data-n="3">\s*<mark>out_ptr2</mark>', block)
    assert "ci-runner-7" in section(page, "summary")


# --- which runs fail, in what order, and why they passed --------------------------------


def test_nondeterministic_run_is_counted_and_listed_with_the_failures():
    noisy = record(
        "model.noisy",
        "nondeterministic",
        mode="train_step",
        stage="eager",
        symptom="nondeterminism",
        outputs=[passing_output("loss")],
        diagnosis="two eager runs differ (loss): no verdict on compiled",
    )
    page = render_html(
        [record("ops.add", "pass", outputs=[passing_output()]), noisy, record("ops.fft", "skip", reason="no cuFFT")]
    )
    assert "1 failing" in text_of(page.split("<main>")[0])
    table = re.search(r'<table class="grid sortable" id="case-table">(.*?)</table>', page, re.S).group(1)
    assert re.findall(r'data-status="(\w+)"', table) == ["nondeterministic", "skip", "pass"]
    # Listed among the failures, with what went wrong, and the table row points there.
    details = section(page, "divergences")
    assert "model.noisy[float32-train_step]" in details and "ops.add" not in details
    block = detail(page, "model.noisy[float32-train_step]")
    assert block.startswith('<details class="case nondeterministic" id="case-1" open>')
    assert "two eager runs differ (loss): no verdict on compiled" in text_of(block)
    assert re.search(r'<a href="#case-1">model\.noisy\[float32-train_step\]</a>', table)


def test_report_takes_which_statuses_fail_from_records_status_only(monkeypatch):
    # Were `skip` to fail a run, the report must count and list it as failing with no change of its own.
    failing = {Status.FAIL, Status.ERROR, Status.XPASS, Status.NONDETERMINISTIC, Status.SKIP}
    monkeypatch.setattr(Status, "failing", property(lambda status: status in failing))
    page = render_html(
        [
            record("ops.add", "pass"),
            record("ops.fft", "skip", reason="no cuFFT"),
            record("ops.known", "xfail", reason="tracked"),
        ]
    )
    assert "1 failing" in text_of(page.split("<main>")[0])
    table = re.search(r'id="case-table">(.*?)</table>', page, re.S).group(1)
    assert re.findall(r'data-status="(\w+)"', table) == ["skip", "xfail", "pass"]
    assert "ops.fft[float32-inference]" in section(page, "divergences")


def test_headline_seed_failures_come_first_then_failing_runs_then_the_rest():
    runs = [
        record("layout_input_gapped", "fail", tags=["layout"], outputs=[failing_output()]),
        record("correct_add", "pass", tags=["correct"]),
        record("seed_index_as_strided_view", "pass", dtype="int32", tags=["seed", "layout"]),
        record(
            "seed_index_as_strided_view", "fail", dtype="int64", tags=["seed", "layout"], outputs=[failing_output()]
        ),
        record("layout_input_overlapping", "error", tags=["layout"], error=ErrorInfo("RuntimeError", "boom")),
        record("seed_rmsnorm_weight_grad_small", "xfail", dtype="bfloat16", tags=["seed"], outputs=[failing_output()]),
    ]
    page = render_html(runs)
    table = re.search(r'id="case-table">(.*?)</table>', page, re.S).group(1)
    order = [" ".join(text_of(row).split()[:2]) for row in re.findall(r"<tr class=\"row-.*?</tr>", table, re.S)]
    assert order == [
        "fail seed_index_as_strided_view[int64-inference]",
        "fail layout_input_gapped[float32-inference]",
        "error layout_input_overlapping[float32-inference]",
        "xfail seed_rmsnorm_weight_grad_small[bfloat16-inference]",
        "pass seed_index_as_strided_view[int32-inference]",
        "pass correct_add[float32-inference]",
    ]
    details = section(page, "divergences")
    assert details.index("seed_index_as_strided_view[int64-inference]") < details.index("layout_input_gapped")


def test_a_pass_with_differences_shows_the_rule_that_passed_it_and_what_it_means():
    by_noise = passing_output(
        "grad.weight",
        bad=3,
        bad_pct=0.5,
        max_abs=2e-5,
        rule="rmse_vs_fp64",
        passed_by="summation_noise",
        rmse_actual=1.2e-6,
        rmse_expected=4e-8,
        rmse_multiplier=3.0,
        rmse_floor=4.5e-6,
        note="differs from eager beyond tolerance in 3 elements; within float32 summation noise of float64",
    )
    by_rmse = passing_output(
        "out0",
        bad=7,
        bad_pct=21.9,
        rule="rmse_vs_fp64",
        passed_by="rmse_vs_fp64",
        rmse_actual=2e-7,
        rmse_expected=3e-7,
        rmse_multiplier=2.0,
    )
    exact = passing_output("out1")
    page = render_html(
        [
            record("ops.sum", "pass", mode="training", outputs=[exact, by_noise, by_rmse]),
            record("ops.add", "pass", outputs=[passing_output()]),
        ]
    )
    block = detail(page, "ops.sum[float32-training]")
    rows = {
        text_of(row).split()[0]: row
        for row in re.findall(r"<tr class=\"[^\"]*\">\s*<td class=\"mono\">.*?</tr>", block, re.S)
    }
    rule_cells = {name: text_of(re.findall(r"<td.*?</td>", row, re.S)[3]).strip() for name, row in rows.items()}
    assert rule_cells == {"out1": "tolerance", "grad.weight": "summation_noise", "out0": "rmse_vs_fp64"}
    text = " ".join(text_of(block).split())
    assert (
        "Passed by summation_noise: its RMS error against float64 (1.2e-06) is within the noise a correct "
        "float32 sum of many terms has (floor 4.5e-06)"
    ) in text
    assert (
        "Passed by rmse_vs_fp64: its RMS error against a float64 run of the program (2e-07) is within ×2 of eager's own (3e-07)"
        in text
    )
    assert "differs from eager beyond tolerance in 3 elements" in text  # the comparator's note
    assert "passed by summation_noise, rmse_vs_fp64" in text  # on the collapsed block's summary line
    # A clean pass has nothing to explain and no details block.
    with pytest.raises(AssertionError):
        detail(page, "ops.add[float32-inference]")


# --- kernel source ---------------------------------------------------------------------------

LONG_LOAD = (
    "    auto tmp0 = at::vec::VectorizedN<int64_t,2>::loadu(in_ptr0 + static_cast<int64_t>(x2 + 16384L*x1 + "
    "98304L*x0), static_cast<int64_t>(16)); // " + "index arithmetic " * 20 + "END_OF_LONG_LINE"
)
SEED_KERNEL = "\n".join(
    [
        'extern "C" void kernel(const int64_t* in_ptr0, const int64_t* in_ptr1, int64_t* out_ptr0)',
        "{",
        LONG_LOAD,
        "    auto tmp1 = at::vec::VectorizedN<int64_t,2>::loadu(in_ptr1 + static_cast<int64_t>(x2), 16);",
        "    (tmp0 + tmp1).store(out_ptr0 + static_cast<int64_t>(x2 + 49152L*x1 + 196608L*x0), 16);",
        "}",
    ]
)


def seed_kernel(**overrides) -> Localization:
    fields = {
        "answer": "kernel",
        "diverged": True,
        "graph": "inference 0",
        "launch_index": 0,
        "launches": 1,
        "name": "cpp_fused_clone_0",
        "kind": "cpp",
        "source": SEED_KERNEL,
        "buffers": ["out_ptr0", "buf0"],
        "buffer": "buf0",
        "module_path": "/tmp/torchinductor_ci/qx/cqx6saeaixdpz.py",
        "isolated": "kernel is wrong: on eager values of its inputs it still diverges",
        "args": [
            # The overlapping view of seed 000: 2359296 elements over a 1179648-element storage.
            {
                "name": "in_ptr0",
                "buffer": "arg0_1",
                "role": "in",
                "dtype": "int64",
                "size": [12, 4, 768, 64],
                "stride": [98304, 16384, 64, 1],
                "storage_offset": 0,
            },
            {
                "name": "in_ptr1",
                "buffer": "arg1_1",
                "role": "in",
                "dtype": "int64",
                "size": [64, 768],
                "stride": [1, 64],
                "storage_offset": 0,
            },  # permuted, but dense
            {
                "name": "out_ptr0",
                "buffer": "buf0",
                "role": "out",
                "dtype": "int64",
                "size": [12, 4, 768, 64],
                "stride": [196608, 49152, 64, 1],
                "storage_offset": 0,
            },
        ],
    }
    fields.update(overrides)
    return Localization.from_dict(fields)


def test_kernel_source_marks_loads_of_the_non_dense_argument_and_keeps_long_lines_whole():
    page = render_html(
        [
            record(
                "seed_index_as_strided_view",
                "fail",
                dtype="int64",
                outputs=[failing_output()],
                first_divergent_kernel=seed_kernel(),
            )
        ]
    )
    block = detail(page, "seed_index_as_strided_view[int64-inference]")
    lines = re.findall(r'<span class="line( hit)?" data-n="(\d+)">(.*?)</span>\n', block)
    assert {int(n) for hit, n, _ in lines if hit} == {1, 3, 5}  # signature, the in_ptr0 load, the store
    long_line = html_lib.unescape(re.sub(r"<[^>]+>", "", lines[2][2]))
    assert long_line == LONG_LOAD  # whole, to its last character
    assert "<mark>in_ptr0</mark>" in block and "<mark>in_ptr1</mark>" not in block
    args = {
        text_of(row).split()[0]: row
        for row in re.findall(r"<tr class=\"[^\"]*\"><td class=\"mono\">.*?</tr>", block, re.S)
    }
    assert 'class="buffer-hit"' in args["in_ptr0"] and "non-dense layout" in text_of(args["in_ptr0"])
    assert 'class="buffer-hit"' not in args["in_ptr1"]
    assert "lines touch out_ptr0, in_ptr0" in text_of(block)
    # Long lines wrap inside the panel instead of running past its right edge.
    styles = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    source_pre = re.search(r"\.source pre \{([^}]*)\}", styles).group(1)
    assert "white-space: pre-wrap" in source_pre and "overflow-wrap: anywhere" in source_pre


def test_marked_arguments_name_why():
    marked = marked_arguments(seed_kernel())
    assert marked["out_ptr0"] == "written wrong"
    assert marked["in_ptr0"].startswith(
        "read through a non-dense layout (size (12, 4, 768, 64), stride (98304, 16384, 64, 1))"
    )
    assert "in_ptr1" not in marked
    # A kernel that reads the very buffer it writes wrong (aliasing) marks that input too.
    aliased = seed_kernel(
        args=[
            {
                "name": "in_ptr1",
                "buffer": "buf0",
                "role": "in",
                "dtype": "int64",
                "size": [4],
                "stride": [1],
                "storage_offset": 0,
            }
        ]
    )
    assert marked_arguments(aliased)["in_ptr1"] == "reads buf0, the buffer written wrong"
    # Nothing is marked for an answer that names no kernel.
    assert marked_arguments(seed_kernel(answer="stage", stage="aot_eager")) == {}


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} not installed (Debian package `chromium`)")
def test_long_kernel_lines_wrap_in_headless_chromium(tmp_path):
    page_path = tmp_path / "kernel.html"
    page_path.write_text(
        render_html(
            [record("seed", "fail", dtype="int64", outputs=[failing_output()], first_divergent_kernel=seed_kernel())]
        ),
        encoding="utf-8",
    )
    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=900,4000", "--hide-scrollbars", page_path.as_uri())
    width, height, channels, pixels = read_png(str(shot))
    row_bytes = width * channels
    # Rows where most of the width is --hit, the marked lines' background (glyphs cover the rest).
    rows = [
        y
        for y in range(height)
        if count_color(pixels[y * row_bytes : (y + 1) * row_bytes], channels, "#fff1b8") > width // 3
    ]
    bands = []  # runs of consecutive rows: one per marked line (adjacent lines would merge; these are not)
    for y in rows:
        if bands and y == bands[-1][1] + 1:
            bands[-1][1] = y
        else:
            bands.append([y, y])
    # The args table's marked rows come first; the source's three marked lines last.
    heights = [end - start + 1 for start, end in bands][-3:]
    # The long load wraps onto several rows: its band is taller than the signature's and the store's.
    assert heights[1] >= 2.5 * max(heights[0], heights[2]), heights


# --- baseline --------------------------------------------------------------------------------


def test_baseline_taken_another_way_is_a_visible_warning(tmp_path):
    emulated = [
        record(
            "seed_index_as_strided_view",
            "fail",
            dtype="int64",
            emulation="boundary-downcast",
            outputs=[failing_output()],
        )
    ]
    plain = [record("seed_index_as_strided_view", "pass", dtype="int64")]
    meta = {**RUN_META, "emulation": "boundary-downcast"}
    page = render_html(emulated, meta, plain, {**RUN_META, "emulation": None})
    warning = re.search(
        r'<div class="setup-warning" id="baseline-setup-warning".*?</div>', section(page, "baseline"), re.S
    )
    text = " ".join(text_of(warning.group(0)).split())
    assert "emulation: baseline without emulation, this run boundary-downcast" in text
    assert "device" not in text and "backend" not in text
    # Records alone tell it too (a baseline file without run metadata), and device and backend count.
    other = [record("seed_index_as_strided_view", "pass", dtype="int64", device="cuda:3", backend="aot_eager")]
    text = " ".join(text_of(section(render_html(emulated, {}, other), "baseline")).split())
    assert (
        "emulation: baseline without emulation, this run boundary-downcast device: baseline cuda, this run cpu "
        "backend: baseline aot_eager, this run inductor"
    ) in text
    # Same setup (shards on other device indices included): no warning.
    shard = [
        record("seed_index_as_strided_view", "fail", dtype="int64", emulation="boundary-downcast", device="cuda:0")
    ]
    same = [record("seed_index_as_strided_view", "pass", dtype="int64", emulation="boundary-downcast", device="cuda:1")]
    assert "baseline-setup-warning" not in render_html(
        shard, {**meta, "device": "cuda:0"}, same, {**meta, "device": "cuda:1"}
    )
    # write_report reads the baseline file's run metadata.
    write_results(tmp_path / "now.json", emulated, meta)
    write_results(tmp_path / "before.json", plain, {**RUN_META, "emulation": None})
    write_report([str(tmp_path / "now.json")], str(tmp_path / "r.html"), str(tmp_path / "before.json"))
    assert 'id="baseline-setup-warning"' in (tmp_path / "r.html").read_text(encoding="utf-8")


# --- console ---------------------------------------------------------------------------------


def test_console_keeps_diagnoses_on_failing_runs_and_says_where_the_kernel_is():
    narrowing = "precision narrowing, not layout: every compiled value equals eager on narrowed inputs"
    passing = record(
        "layout_input_contiguous",
        "pass",
        dtype="float64",
        emulation="boundary-downcast",
        outputs=[passing_output()],
        diagnosis=narrowing,
    )
    assert "precision narrowing" not in passing.summary() and passing.diagnosis == narrowing
    failing = record(
        "seed_index_as_strided_view",
        "fail",
        dtype="int64",
        outputs=[failing_output()],
        diagnosis="layout: values differ from eager even on narrowed inputs",
        first_divergent_kernel=seed_kernel(),
    )
    lines = failing.summary().splitlines()
    assert "    kernel source: /tmp/torchinductor_ci/qx/cqx6saeaixdpz.py" in lines
    assert "    arg in_ptr0 = arg0_1 (in) int64 size (12, 4, 768, 64) stride (98304, 16384, 64, 1)" in lines
    assert "    arg out_ptr0 = buf0 (out) int64 size (12, 4, 768, 64) stride (196608, 49152, 64, 1)" in lines
    assert "    diagnosis: layout: values differ from eager even on narrowed inputs" in lines
    noisy = record("model.noisy", "nondeterministic", diagnosis="two eager runs differ (loss)")
    assert "diagnosis: two eager runs differ (loss)" in noisy.summary()


def test_junit_xml_holds_control_characters_of_names_and_tags_as_escapes():
    import xml.etree.ElementTree as ET

    from harness.report.junit import junit_xml

    record = CaseResult(
        case="nul\x00case",
        device="cpu",
        backend="inductor",
        dtype="float32",
        mode="inference",
        status="fail",
        tags=["tag\x01", "x"],
        reason="bell\x07",
        duration_s=1.0,
    )
    document = junit_xml([record])
    case = ET.fromstring(document).find("testsuite/testcase")  # well-formed XML 1.0
    assert case.get("name") == "nul\\x00case[float32-inference]" and case.get("classname") == "harness.cpu.tag\\x01"


def test_the_navigation_counts_failures_apart_from_runs_that_passed_with_differences():
    nav = lambda page: re.search(r'<nav class="sections">(.*?)</nav>', page, re.S).group(1)  # noqa: E731
    closer = passing_output(
        "out0", bad=3, rule="rmse_vs_fp64", note="differs from eager beyond tolerance in 3 elements; closer to float64"
    )
    clean = nav(render_html([record("ops.add", "pass", outputs=[closer]), record("ops.mul", "pass")], RUN_META))
    assert "Failures" not in clean and ">Other differences (1)</a>" in clean
    mixed = render_html(sample_records() + [record("ops.sub", "pass", outputs=[closer])], RUN_META)
    assert ">Failures (2)</a>" in nav(mixed) and ">Other differences (" in nav(mixed)
    # The second link lands on the first run that did not fail.
    after = mixed.split('id="divergences-passed"', 1)[1]
    assert after.find("ops.sub") < after.find("ops.softmax") or "ops.softmax" not in after


def test_a_junit_failure_reads_the_same_every_night():
    from harness.report.junit import junit_xml

    def night(duration, cache):
        kernel = divergent_kernel()
        kernel.module_path = f"/tmp/{cache}/xy/cxyabc.py"
        return junit_xml(
            [
                record(
                    "ops.softmax",
                    "fail",
                    duration_s=duration,
                    outputs=[failing_output()],
                    first_divergent_kernel=kernel,
                    command="python -m harness run ops.softmax",
                )
            ]
        )

    first, second = night(1.234, "torchinductor_alice"), night(9.87, "torchinductor_bob")
    body = lambda document: re.search(r"<failure[^>]*>(.*?)</failure>", document, re.S).group(1)  # noqa: E731
    assert body(first) == body(second)
    assert "torchinductor" not in body(first) and "1.2s" not in body(first)
    assert "cpp_fused" in body(first) or "triton" in body(first)  # the kernel is still named


def test_the_summary_charts_runs_by_family_and_outputs_by_difference_over_tolerance():
    far = failing_output()  # beyond its tolerance
    near = passing_output("out1", max_abs=5e-6, expected_max=1.0)  # half its tolerance (1e-5 + 1.3e-6)
    records = [
        record("a", "fail", tags=["layout"], outputs=[far, near]),
        record("b", "pass", tags=["layout"]),
        record("c", "pass", tags=["seed"], outputs=[passing_output("out0", max_abs=0.0)]),
    ]
    summary = section(render_html(records, RUN_META), "summary")
    family = re.search(r'<svg[^>]*class="chart status-by-family".*?</svg>', summary, re.S).group(0)
    # The failing family comes first, its bar split by status.
    assert family.index("layout") < family.index("seed")
    assert "layout: 1 fail" in family and "layout: 1 pass" in family and "seed: 1 pass" in family
    ratios = re.search(r'<svg[^>]*class="chart tolerance-ratio".*?</svg>', summary, re.S).group(0)
    assert "0: 1 outputs passed" in ratios and "0.1-1: 1 outputs passed" in ratios
    assert re.search(r"(1-10|10-100|&gt;100): 1 outputs failed", ratios), ratios


def test_a_pass_by_a_rule_says_which_in_the_console_the_report_row_and_junit():
    # Before, a pass with 97,417 elements beyond tolerance showed its count and no word of why it passed.
    from harness.report.junit import junit_xml

    ruled = passing_output(bad=97417, numel=470080, bad_pct=20.7, rule="rmse_vs_fp64", passed_by="rmse_vs_fp64")
    undefined = passing_output("out1", undefined=3)
    passed = record("ops.mlp", "pass", outputs=[ruled, undefined])
    said = "out0 by rmse_vs_fp64 (97417 beyond tolerance); out1 with 3 undefined elements left out"
    assert passed.passed_by_rules() == said.split("; ")
    assert f"passed by a rule: {said}" in passed.summary(verbose=True)
    assert "passed by a rule" not in passed.summary()  # (the console says it with -v)
    # (the cases table's cell, whose numel sums both outputs; not the outputs table)
    summary_row = next(line for line in render_html([passed]).splitlines() if 'data-v="97417.0"' in line)
    assert "passed by rmse_vs_fp64" in summary_row, summary_row
    assert f'<property name="passed_by" value="{said}"/>' in junit_xml([passed])
    plain = record("ops.add", "pass", outputs=[passing_output()])
    assert plain.passed_by_rules() == [] and "<properties>" not in junit_xml([plain])


def test_a_clean_runs_known_failures_are_drawn_apart_and_counted_as_known():
    # The chart of a run with "no failures" showed a red bar at ">100": the declared known failures' outputs.
    far = failing_output()
    records = [record("known", "xfail", outputs=[far]), record("fine", "pass", outputs=[passing_output("out0")])]
    html = render_html(records, RUN_META)
    header = re.search(r'<div class="verdict">(.*?)</div>', html, re.S).group(1)
    assert "no failures" in header and "1 known failure</strong> (declared, failing as expected)" in header
    ratios = re.search(r'<svg[^>]*class="chart tolerance-ratio".*?</svg>', section(html, "summary"), re.S).group(0)
    assert "outputs failed as declared (known failures)" in ratios
    assert not re.search(r"1 outputs failed<", ratios), ratios
    assert 'fill="#d64545"' not in ratios  # no bar in the failure's red
