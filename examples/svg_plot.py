# SPDX-License-Identifier: Apache-2.0
"""A dependency-free SVG line chart: write_loss_svg(path, {"name": [values...]}, title)."""
from __future__ import annotations

import math
from typing import Optional, Sequence
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 760, 440
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 72, 24, 48, 60
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About `count` round tick values (1, 2 or 5 times a power of ten apart) covering
    [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = [round(first, 12)]
    while ticks[-1] < high - step * 1e-9 or len(ticks) < 2:  # the last tick reaches high
        ticks.append(round(first + step * len(ticks), 12))
    return ticks


def _label(value: float, ticks: Sequence[float]) -> str:
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else abs(value) or 1.0
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 0
    if decimals > 6 or abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:.{decimals}f}"


def write_loss_svg(path: str, series: dict[str, Sequence[float]], title: str,
                   xlabel: str = "step", ylabel: str = "loss", x_start: float = 1,
                   y_range: Optional[tuple[float, float]] = None) -> None:
    """Writes a line chart of every series (value i drawn at x = x_start + i) with axes, ticks,
    labels and a legend. Non-finite values are left out (the line breaks there)."""
    points = {name: [(x_start + i, float(v)) for i, v in enumerate(values)]
              for name, values in series.items()}
    finite = [(x, y) for pts in points.values() for x, y in pts if math.isfinite(y)]
    xs = [x for x, _ in finite] or [x_start, x_start + 1]
    ys = [y for _, y in finite] or [0.0, 1.0]
    x_ticks = nice_ticks(min(xs), max(xs))
    y_ticks = nice_ticks(*(y_range if y_range else (min(ys), max(ys))))
    x_low, x_high = x_ticks[0], x_ticks[-1]
    y_low, y_high = y_ticks[0], y_ticks[-1]
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def px(x: float) -> float:
        return MARGIN_LEFT + (x - x_low) / ((x_high - x_low) or 1.0) * plot_w

    def py(y: float) -> float:
        return MARGIN_TOP + (y_high - y) / ((y_high - y_low) or 1.0) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2:.1f}" y="{MARGIN_TOP / 2 + 4:.1f}" text-anchor="middle" '
           f'font-size="15">{escape(title)}</text>']
    bottom, right = MARGIN_TOP + plot_h, MARGIN_LEFT + plot_w
    for tick in y_ticks:
        y = py(tick)
        out.append(f'<line x1="{MARGIN_LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" '
                   f'stroke="#e6e6e6"/>')
        out.append(f'<line x1="{MARGIN_LEFT - 5}" y1="{y:.1f}" x2="{MARGIN_LEFT}" y2="{y:.1f}" '
                   f'stroke="black"/>')
        out.append(f'<text x="{MARGIN_LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{_label(tick, y_ticks)}</text>')
    for tick in x_ticks:
        x = px(tick)
        out.append(f'<line x1="{x:.1f}" y1="{MARGIN_TOP}" x2="{x:.1f}" y2="{bottom}" '
                   f'stroke="#f0f0f0"/>')
        out.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}" '
                   f'stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 19}" text-anchor="middle">'
                   f'{_label(tick, x_ticks)}</text>')
    out.append(f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" '
               f'fill="none" stroke="black"/>')
    out.append(f'<text x="{MARGIN_LEFT + plot_w / 2:.1f}" y="{HEIGHT - 16}" '
               f'text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="18" y="{MARGIN_TOP + plot_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 18 {MARGIN_TOP + plot_h / 2:.1f})">{escape(ylabel)}</text>')
    longest = max((len(name) for name in points), default=0)
    legend_x = max(MARGIN_LEFT + 8, right - 44 - 7 * longest)  # about 7 px per character
    for index, (name, pts) in enumerate(points.items()):
        color = COLORS[index % len(COLORS)]
        runs: list[list[str]] = [[]]
        for x, y in pts:
            if math.isfinite(y):
                runs[-1].append(f"{px(x):.1f},{py(min(max(y, y_low), y_high)):.1f}")
            elif runs[-1]:
                runs.append([])
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            elif run:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" '
                           f'points="{" ".join(run)}"/>')
        legend_y = MARGIN_TOP + 14 + 18 * index
        out.append(f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 24}" '
                   f'y2="{legend_y - 4}" stroke="{color}" stroke-width="2.5"/>')
        out.append(f'<text x="{legend_x + 30}" y="{legend_y}">{escape(name)}</text>')
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
