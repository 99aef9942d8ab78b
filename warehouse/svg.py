"""Tiny SVG charts for the offline HTML report: axes with ticks and labels, lines,
points, step CDFs and a legend, as one `<svg>` string with no script, no external
reference and no xmlns (inline SVG in HTML5 needs none).

    chart = line_chart(
        [Series("p99 E2E", xs=[10.0, 20.0], ys=[120.0, 340.0], style="linepoints")],
        plot_id="latency-throughput", title="Latency vs throughput",
        x_label="request_throughput_per_s", y_label="e2e (ms)",
    )

Markup contract (the report's browser test reads it): the root is
`<svg class="plot" data-plot=PLOT_ID>`; each series is a `<g class="series"
data-series=NAME>` holding one `<path class="series-line">` (styles line, linepoints,
step) and/or one `<circle class="series-point">` per point (styles points,
linepoints). Non-finite and None values are dropped before drawing.

Tick positions: "nice numbers" (1, 2, 5 times a power of ten), from P. Heckbert,
"Nice numbers for graph labels", Graphics Gems (1990).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["PALETTE", "Series", "line_chart", "nice_ticks"]

# Okabe & Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/), black last.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")

_STYLES = ("line", "points", "linepoints", "step")


@dataclass(frozen=True, slots=True)
class Series:
    """One named series of (x, y) points in data units.

    `style`: "line" (polyline in the given order), "points" (circles), "linepoints"
    (both), "step" (a step function: horizontal to each x at the previous y, then
    vertical to its y, starting from (xs[0], 0); the shape of an empirical CDF).
    `labels`: optional text drawn beside each point (same length as xs).
    `color`: a CSS colour; None takes the palette colour of the series' position.
    """

    name: str
    xs: Sequence[float | None]
    ys: Sequence[float | None]
    style: str = "line"
    labels: Sequence[str] | None = None
    color: str | None = None


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """About `target` tick values covering [lo, hi], at a step of 1, 2 or 5 times a power
    of ten, the first <= lo and the last >= hi. lo == hi gives a range around the value.
    Raises ValueError when a bound is not finite. Source: Heckbert, Graphics Gems (1990)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"nice_ticks: bounds must be finite (got {lo!r}, {hi!r})")
    if lo > hi:
        lo, hi = hi, lo
    if lo == hi:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice((hi - lo) / max(target - 1, 1), round_=True)
    first = math.floor(lo / step) * step
    last = math.ceil(hi / step) * step
    n = int(round((last - first) / step))
    return [_clean(first + i * step) for i in range(n + 1)]


def _nice(x: float, round_: bool) -> float:
    """The nice number (1, 2, 5 x 10^k) nearest to x (round_) or just above it."""
    exp = math.floor(math.log10(x))
    frac = x / 10**exp
    if round_:
        nice = 1 if frac < 1.5 else 2 if frac < 3 else 5 if frac < 7 else 10
    else:
        nice = 1 if frac <= 1 else 2 if frac <= 2 else 5 if frac <= 5 else 10
    return nice * 10**exp


def _clean(v: float) -> float:
    """Round away binary noise of tick arithmetic (0.30000000000000004 -> 0.3)."""
    return float(f"{v:.12g}")


def _tick_text(v: float, step: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e6 or (abs(v) < 1e-3):
        return f"{v:.3g}"
    decimals = max(0, -int(math.floor(math.log10(step)))) if step < 1 else 0
    return f"{v:,.{decimals}f}"


def _points(s: Series) -> list[tuple[float, float]]:
    return [
        (float(x), float(y))
        for x, y in zip(s.xs, s.ys)
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
    ]


def line_chart(
    series: Sequence[Series],
    *,
    plot_id: str,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 560,
    height: int = 330,
    x_min: float | None = None,
    y_min: float | None = None,
    y_max: float | None = None,
) -> str:
    """One chart as an `<svg>` string (markup contract in the module docstring).

    Axes span the data (plus `x_min`/`y_min`/`y_max` when given, e.g. y_min=0 for
    latencies, y_max=1 for a CDF), widened to nice tick values. `width`/`height` in px,
    legend included. A chart whose series have no finite point shows "no data" inside
    empty axes. Raises ValueError on an unknown style, when `labels` and `xs` differ in
    length, or when the size leaves a plot area under 40 x 40 px.
    """
    for s in series:
        if s.style not in _STYLES:
            raise ValueError(f"series {s.name!r}: style: unknown {s.style!r} (expected {', '.join(_STYLES)})")
        if s.labels is not None and len(s.labels) != len(s.xs):
            raise ValueError(f"series {s.name!r}: labels: {len(s.labels)} labels for {len(s.xs)} points")
    pts = {i: _points(s) for i, s in enumerate(series)}
    all_x = [x for p in pts.values() for x, _ in p]
    all_y = [y for p in pts.values() for _, y in p]
    for i, s in enumerate(series):
        if s.style == "step" and pts[i]:
            all_y.append(0.0)
    if x_min is not None:
        all_x.append(x_min)
    if y_min is not None:
        all_y.append(y_min)
    if y_max is not None:
        all_y.append(y_max)
    has_data = any(pts.values())
    xt = nice_ticks(min(all_x), max(all_x)) if has_data else [0.0, 1.0]
    yt = nice_ticks(min(all_y), max(all_y)) if has_data else [0.0, 1.0]

    legend_w = 130 if series else 0
    left, right, top, bottom = 64, 16 + legend_w, 34, 48
    pw, ph = width - left - right, height - top - bottom
    if pw < 40 or ph < 40:
        raise ValueError(f"chart {plot_id!r}: {width}x{height} px is too small for axes and legend")
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    out = [
        f'<svg class="plot" data-plot="{escape(plot_id)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" '
        'font-family="system-ui, sans-serif" font-size="11">',
        f'<text x="{width / 2:.1f}" y="18" text-anchor="middle" font-size="13" '
        f'font-weight="600">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#888"/>',
    ]
    xstep = xt[1] - xt[0] if len(xt) > 1 else 1.0
    ystep = yt[1] - yt[0] if len(yt) > 1 else 1.0
    for v in xt:
        X = sx(v)
        out.append(f'<line x1="{X:.1f}" y1="{top}" x2="{X:.1f}" y2="{top + ph}" stroke="#eee"/>')
        out.append(f'<line x1="{X:.1f}" y1="{top + ph}" x2="{X:.1f}" y2="{top + ph + 4}" stroke="#888"/>')
        out.append(f'<text class="tick x" x="{X:.1f}" y="{top + ph + 16}" '
                   f'text-anchor="middle">{_tick_text(v, xstep)}</text>')
    for v in yt:
        Y = sy(v)
        out.append(f'<line x1="{left}" y1="{Y:.1f}" x2="{left + pw}" y2="{Y:.1f}" stroke="#eee"/>')
        out.append(f'<line x1="{left - 4}" y1="{Y:.1f}" x2="{left}" y2="{Y:.1f}" stroke="#888"/>')
        out.append(f'<text class="tick y" x="{left - 6}" y="{Y + 4:.1f}" '
                   f'text-anchor="end">{_tick_text(v, ystep)}</text>')
    out.append(f'<text class="axis-label x" x="{left + pw / 2:.1f}" y="{height - 8}" '
               f'text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text class="axis-label y" transform="translate(14 {top + ph / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    if not has_data:
        out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph / 2:.1f}" text-anchor="middle" '
                   'fill="#888">no data</text>')

    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        p = pts[i]
        out.append(f'<g class="series" data-series="{escape(s.name)}" data-points="{len(p)}">')
        if p and s.style in ("line", "linepoints", "step"):
            if s.style == "step":
                d = [f"M{sx(p[0][0]):.2f},{sy(0.0):.2f}"]
                prev_y = 0.0
                for x, y in p:
                    d.append(f"L{sx(x):.2f},{sy(prev_y):.2f}L{sx(x):.2f},{sy(y):.2f}")
                    prev_y = y
            else:
                d = [f"M{sx(p[0][0]):.2f},{sy(p[0][1]):.2f}"]
                d += [f"L{sx(x):.2f},{sy(y):.2f}" for x, y in p[1:]]
            out.append(f'<path class="series-line" d="{"".join(d)}" fill="none" stroke="{color}" '
                       'stroke-width="1.8" stroke-linejoin="round"/>')
        if s.style in ("points", "linepoints"):
            for x, y in p:
                out.append(f'<circle class="series-point" cx="{sx(x):.2f}" cy="{sy(y):.2f}" r="3.5" '
                           f'fill="{color}"><title>{escape(s.name)}: ({x:.6g}, {y:.6g})</title></circle>')
        if s.labels is not None:
            kept = [
                (lab, float(x), float(y)) for lab, x, y in zip(s.labels, s.xs, s.ys)
                if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
            ]
            for lab, x, y in kept:
                out.append(f'<text class="point-label" x="{sx(x) + 5:.1f}" y="{sy(y) - 5:.1f}" '
                           f'fill="{color}" font-size="10">{escape(lab)}</text>')
        out.append("</g>")
        ly = top + 8 + i * 18
        lx = width - legend_w + 4
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 18}" y2="{ly}" stroke="{color}" stroke-width="3"/>')
        out.append(f'<text class="legend" x="{lx + 24}" y="{ly + 4}">{escape(_short(s.name))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _short(name: str, n: int = 16) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"
