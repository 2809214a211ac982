"""Inline SVG pictures computed from record fields (never from tensors).

Both pictures return `markupsafe.Markup`: every piece of text placed inside
them goes through `escape`, so templates can insert them unescaped.
"""

from __future__ import annotations

import math
from typing import Sequence

from markupsafe import Markup, escape

from harness.records import ErrorHistogram, MismatchMap

# Bad fraction thresholds of a map cell, log-spaced: a cell holding one bad
# element among thousands must still stand out from a clean cell.
MAP_THRESHOLDS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 0.6, 1.0)
MAP_PALETTE = ("#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026", "#4a0015")
MAP_CLEAN = "#e8edf3"
MAP_WIDTH = 320.0
MAP_MAX_HEIGHT = 320.0
MAP_MIN_PLOT_HEIGHT = 24.0

HIST_WIDTH = 380.0
HIST_HEIGHT = 150.0
HIST_BAR_ABOVE_ATOL = "#d64545"
HIST_BAR_BELOW_ATOL = "#7d9cc4"
HIST_BAR_ZERO = "#9aa7b4"
HIST_MAX_LABELS = 9

FONT = "font-family:ui-sans-serif,system-ui,sans-serif;font-size:10px;fill:#4a5563"


def _num(value: float) -> str:
    # Two decimals keep the file small; sub-pixel precision beyond that is invisible.
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text or "0"


def _text(x: float, y: float, body: str, anchor: str = "start") -> str:
    return f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" style="{FONT}">{escape(body)}</text>'


def _svg(width: float, height: float, label: str, body: list[str], css_class: str) -> Markup:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" role="img" '
        f'width="{_num(width)}" height="{_num(height)}" viewBox="0 0 {_num(width)} {_num(height)}">'
        f"<title>{escape(label)}</title>"
    )
    return Markup(head + "".join(body) + "</svg>")


def _cell_capacity(index: int, cell: int, total: int) -> int:
    # The last row/column of cells pools fewer elements when the size is not a multiple.
    return max(1, min(cell, total - index * cell))


def _map_level(fraction: float) -> int:
    for level, threshold in enumerate(MAP_THRESHOLDS):
        if fraction <= threshold:
            return level
    return len(MAP_THRESHOLDS) - 1


def _map_levels(mismatch: MismatchMap) -> list[list[int]]:
    """Palette level per cell, -1 for cells without a bad element."""
    levels = []
    for i, row in enumerate(mismatch.counts):
        rows_in_cell = _cell_capacity(i, mismatch.cell_rows, mismatch.rows)
        line = []
        for j, count in enumerate(row):
            if count <= 0:
                line.append(-1)
                continue
            capacity = rows_in_cell * _cell_capacity(j, mismatch.cell_cols, mismatch.cols)
            line.append(_map_level(min(1.0, count / capacity)))
        levels.append(line)
    return levels


def _level_paths(levels: list[list[int]], cell_w: float, cell_h: float, x0: float, y0: float) -> list[str]:
    # One <path> per colour, runs of equal cells merged: a 64x64 map stays a few KB,
    # which is what keeps a 1,000-case report fast to render and to open.
    segments: dict[int, list[str]] = {}
    for i, row in enumerate(levels):
        j = 0
        while j < len(row):
            level, start = row[j], j
            while j < len(row) and row[j] == level:
                j += 1
            if level >= 0:
                x, y, w = x0 + start * cell_w, y0 + i * cell_h, (j - start) * cell_w
                segments.setdefault(level, []).append(f"M{_num(x)} {_num(y)}h{_num(w)}v{_num(cell_h)}h-{_num(w)}z")
    return [f'<path fill="{MAP_PALETTE[level]}" d="{"".join(parts)}"/>' for level, parts in sorted(segments.items())]


def _map_legend(x0: float, y0: float) -> list[str]:
    swatch = MAP_WIDTH / (len(MAP_PALETTE) + 1)
    parts = [f'<rect x="{_num(x0)}" y="{_num(y0)}" width="{_num(swatch)}" height="8" fill="{MAP_CLEAN}"/>']
    parts.append(_text(x0 + swatch / 2, y0 + 19, "0", "middle"))
    # Each swatch is labelled with the upper bound of its share of bad elements.
    for level, (color, threshold) in enumerate(zip(MAP_PALETTE, MAP_THRESHOLDS), start=1):
        x = x0 + level * swatch
        parts.append(f'<rect x="{_num(x)}" y="{_num(y0)}" width="{_num(swatch)}" height="8" fill="{color}"/>')
        parts.append(_text(x + swatch / 2, y0 + 19, f"{threshold * 100:g}%", "middle"))
    return parts


def mismatch_map_svg(mismatch: MismatchMap | None, label: str = "") -> Markup:
    """Heat map of the bad fraction per cell of the (rows, cols) projection."""
    if mismatch is None or not mismatch.counts or not mismatch.counts[0]:
        return Markup("")
    grid_rows, grid_cols = len(mismatch.counts), len(mismatch.counts[0])
    cell_w = MAP_WIDTH / grid_cols
    # Square cells when they fit; a 1-row map (a 1-D output) still gets a readable strip.
    cell_h = min(max(cell_w, MAP_MIN_PLOT_HEIGHT / grid_rows), MAP_MAX_HEIGHT / grid_rows)
    x0, y0 = 46.0, 16.0
    plot_h = grid_rows * cell_h
    body = [
        f'<rect x="{_num(x0)}" y="{_num(y0)}" width="{_num(MAP_WIDTH)}" height="{_num(plot_h)}" fill="{MAP_CLEAN}"/>',
        *_level_paths(_map_levels(mismatch), cell_w, cell_h, x0, y0),
        f'<rect x="{_num(x0)}" y="{_num(y0)}" width="{_num(MAP_WIDTH)}" height="{_num(plot_h)}" '
        'fill="none" stroke="#8a96a3" stroke-width="0.8"/>',
        _text(x0, y0 - 5, "col 0"),
        _text(x0 + MAP_WIDTH, y0 - 5, f"{mismatch.cols - 1}", "end"),
        _text(x0 - 4, y0 + 9, "row 0", "end"),
        _text(x0 - 4, y0 + plot_h, f"{mismatch.rows - 1}", "end"),
        *_map_legend(x0, y0 + plot_h + 10),
    ]
    bad = sum(sum(row) for row in mismatch.counts)
    cells = f"{mismatch.cell_rows}x{mismatch.cell_cols}"
    title = f"{label}: {bad} bad elements over {mismatch.rows}x{mismatch.cols}, cells of {cells}"
    return _svg(x0 + MAP_WIDTH + 8, y0 + plot_h + 36, title.strip(": "), body, "mismatch-map")


def format_edge(edge: float) -> str:
    """Bin edges are decades: 1e-3 reads better than 0.001 and stays short."""
    if math.isinf(edge):
        return "∞"
    if edge == 0:
        return "0"
    exponent = math.log10(abs(edge))
    if abs(exponent - round(exponent)) < 1e-9:
        power = int(round(exponent))
        return "1" if power == 0 else f"1e{power}"
    mantissa, _, power = f"{edge:.0e}".partition("e")
    return f"{mantissa}e{int(power)}"


def _count_label(count: int) -> str:
    for divisor, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if count >= divisor:
            return f"{count // divisor}{suffix}"
    return str(count)


def _log_height(count: int, top: float, plot_h: float) -> float:
    # log(1 + n): a bin holding a single element still gets a visible bar.
    return plot_h * math.log10(1 + max(count, 0)) / math.log10(1 + top) if top > 0 else 0.0


def _atol_position(edges: Sequence[float], atol: float) -> float | None:
    """Fractional bin index of atol on the log axis, None when it is off the axis."""
    if atol <= 0:
        return None
    for i in range(len(edges) - 1):
        low, high = edges[i], edges[i + 1]
        if low <= atol <= high and low > 0 and math.isfinite(high):
            return i + (math.log10(atol) - math.log10(low)) / (math.log10(high) - math.log10(low))
    return None


def error_histogram_svg(histogram: ErrorHistogram | None, atol: float = 0.0, label: str = "") -> Markup:
    """Bars of |actual - expected| per decade bin, counts on a log scale; exact matches apart."""
    if histogram is None or (not histogram.counts and not histogram.zero):
        return Markup("")
    counts, edges = list(histogram.counts), list(histogram.edges)
    top = max(counts + [histogram.zero, 1])
    x0, y0, plot_h = 40.0, 8.0, HIST_HEIGHT - 40.0
    slots = len(counts) + (1.5 if histogram.zero else 0)
    # Room on the right for the last edge label.
    slot_w = (HIST_WIDTH - x0 - 18) / max(slots, 1)
    base = y0 + plot_h
    body = _histogram_axis(x0, y0, plot_h, top)
    first_bin_x = x0
    if histogram.zero:
        height = _log_height(histogram.zero, top, plot_h)
        body.append(_bar(x0, base - height, slot_w, height, HIST_BAR_ZERO, f"exact match: {histogram.zero} elements"))
        body.append(_text(x0 + slot_w / 2, base + 12, "=0", "middle"))
        first_bin_x = x0 + 1.5 * slot_w
    atol_at = _atol_position(edges, atol)
    for i, count in enumerate(counts):
        height = _log_height(count, top, plot_h)
        low = edges[i] if i < len(edges) else float("nan")
        high = edges[i + 1] if i + 1 < len(edges) else float("nan")
        color = HIST_BAR_BELOW_ATOL if atol_at is not None and i + 1 <= atol_at else HIST_BAR_ABOVE_ATOL
        tip = f"[{format_edge(low)}, {format_edge(high)}): {count} elements"
        body.append(_bar(first_bin_x + i * slot_w, base - height, slot_w, height, color, tip))
    body.extend(_edge_labels(edges, first_bin_x, slot_w, base))
    if atol_at is not None:
        x = first_bin_x + atol_at * slot_w
        body.append(
            f'<line x1="{_num(x)}" y1="{_num(y0)}" x2="{_num(x)}" y2="{_num(base)}" '
            'stroke="#1f2933" stroke-dasharray="3 2"/>'
        )
        body.append(_text(x + 3, y0 + 9, "atol"))
    body.append(_text(first_bin_x + len(counts) * slot_w / 2, base + 26, "|actual − expected| (log scale)", "middle"))
    title = f"{label}: error distribution, {sum(counts)} differing elements, {histogram.zero} exact"
    return _svg(HIST_WIDTH, HIST_HEIGHT, title.strip(": "), body, "error-histogram")


def _bar(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (
        f'<rect x="{_num(x + 0.5)}" y="{_num(y)}" width="{_num(max(w - 1, 0.5))}" height="{_num(h)}" fill="{color}">'
        f"<title>{escape(tip)}</title></rect>"
    )


def _histogram_axis(x0: float, y0: float, plot_h: float, top: int) -> list[str]:
    base = y0 + plot_h
    parts = [
        f'<line x1="{_num(x0)}" y1="{_num(base)}" x2="{_num(HIST_WIDTH - 8)}" y2="{_num(base)}" stroke="#8a96a3"/>'
    ]
    decades = int(math.log10(max(top, 1))) + 1
    # At most five gridlines: a label per decade would overlap once counts reach millions.
    step = 10 ** math.ceil(decades / 5)
    tick = 1
    while tick <= top:
        y = base - _log_height(tick, top, plot_h)
        parts.append(
            f'<line x1="{_num(x0 - 3)}" y1="{_num(y)}" x2="{_num(HIST_WIDTH - 8)}" y2="{_num(y)}" stroke="#e3e8ee"/>'
        )
        parts.append(_text(x0 - 5, y + 3, _count_label(tick), "end"))
        tick *= step
    return parts


def _edge_labels(edges: Sequence[float], first_bin_x: float, slot_w: float, base: float) -> list[str]:
    stride = max(1, math.ceil(len(edges) / HIST_MAX_LABELS))
    return [
        _text(first_bin_x + i * slot_w, base + 12, format_edge(edge), "middle")
        for i, edge in enumerate(edges)
        if i % stride == 0 or i == len(edges) - 1
    ]


# The summary's charts: where a run stands at a glance.
STATUS_FILL = {
    "fail": "#c62828",
    "error": "#8e24aa",
    "xpass": "#b26a00",
    "nondeterministic": "#ad1457",
    "xfail": "#6b6f9e",
    "skip": "#b0b8c1",
    "pass": "#2e7d32",
}
BARS_WIDTH = 560.0
BARS_ROW = 16.0
BARS_LABEL = 150.0


def status_by_family_svg(rows: Sequence[tuple[str, Sequence[tuple[str, int]]]]) -> Markup:
    """One bar per family (a record's first tag), its runs split by status, each bar as long as the family is
    large: the failing families stand out first."""
    if not rows:
        return Markup("")
    largest = max(sum(n for _, n in counts) for _, counts in rows) or 1
    plot = BARS_WIDTH - BARS_LABEL - 40
    body = []
    for index, (family, counts) in enumerate(rows):
        y = 4 + index * (BARS_ROW + 4)
        body.append(_text(BARS_LABEL - 6, y + BARS_ROW - 4, family[:24], anchor="end"))
        x = BARS_LABEL
        for status, count in counts:
            if not count:
                continue
            width = plot * count / largest
            body.append(
                f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(width, 1))}" height="{_num(BARS_ROW)}" '
                f'fill="{STATUS_FILL.get(status, "#9aa7b4")}"><title>{escape(f"{family}: {count} {status}")}'
                "</title></rect>"
            )
            x += width
        body.append(_text(x + 4, y + BARS_ROW - 4, str(sum(n for _, n in counts))))
    height = 8 + len(rows) * (BARS_ROW + 4)
    return _svg(BARS_WIDTH, height, "runs by family and status", body, "chart status-by-family")


def tolerance_ratio_svg(buckets: Sequence[tuple[str, int, int, int]], limit_at: int | None = None) -> Markup:
    """How far each compared output's largest difference is from its tolerance, as bars of (passed, failed,
    failed as declared) outputs per decade, the declared ones in the expected failure's own colour; a dashed line
    before bucket `limit_at` marks the tolerance."""
    if not any(sum(counts) for _, *counts in buckets):
        return Markup("")
    largest = max(sum(counts) for _, *counts in buckets) or 1
    column = (HIST_WIDTH - 20) / len(buckets)
    plot = HIST_HEIGHT - 34
    body = []
    for index, (label, passed, failed, expected) in enumerate(buckets):
        x = 10 + index * column
        y = 8 + plot
        for count, fill, what in (
            (passed, HIST_BAR_BELOW_ATOL, "passed"),
            (expected, STATUS_FILL["xfail"], "failed as declared (known failures)"),
            (failed, HIST_BAR_ABOVE_ATOL, "failed"),
        ):
            if not count:
                continue
            height = max(plot * count / largest, 1)
            y -= height
            body.append(
                f'<rect x="{_num(x + 2)}" y="{_num(y)}" width="{_num(column - 4)}" height="{_num(height)}" '
                f'fill="{fill}"><title>{escape(f"{label}: {count} outputs {what}")}</title></rect>'
            )
        body.append(_text(x + column / 2, HIST_HEIGHT - 12, label, anchor="middle"))
    if limit_at is not None:
        x = 10 + limit_at * column
        body.append(
            f'<line x1="{_num(x)}" y1="4" x2="{_num(x)}" y2="{_num(8 + plot)}" stroke="#4a5563" '
            'stroke-dasharray="3,3"/>'
        )
        body.append(_text(x + 3, 12, "tolerance"))
    return _svg(HIST_WIDTH, HIST_HEIGHT, "outputs by largest difference over tolerance", body, "chart tolerance-ratio")
