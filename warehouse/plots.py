"""Plots of the HTML report with plotly (interactive: hover values, zoom, legend toggles;
offline: plotly.js inlined once per report, no network).

    chart([Series("e2e p99", xs, ys, style="linepoints", labels=["c1", "c2"])],
          plot_id="latency-throughput", title="...", x_label="req/s", y_label="ms")

Each chart is `<div class="plot" data-plot=ID data-traces=N data-points=M>` plus its
figure as JSON in `<script type="application/json" class="plot-figure" data-plot=ID>`
(plotly's own figure schema, validated by plotly.graph_objects); one script at the end
of the page (`draw_script`) draws every figure with `Plotly.newPlot`. The figure JSON is
what the tests read: the numbers drawn are the numbers written.
Series styles: "line", "linepoints", "points", "step" (a CDF staircase from 0: plotly
`line_shape="hv"` with a first point at y = 0), "errorbars" (points with asymmetric
error bars from `err_low`/`err_high`, e.g. a 95% CI).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from html import escape
from typing import Any

import plotly.graph_objects as go
import plotly.offline

__all__ = ["Series", "chart", "draw_script", "plotly_js"]

_STYLES = ("line", "linepoints", "points", "step", "errorbars")
_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"format": "png"}}


@dataclass(frozen=True)
class Series:
    """One trace: `xs`/`ys` of equal length (None values are gaps, dropped); `labels`
    per point (written beside each marker and shown on hover, e.g. the sweep point);
    `color` a CSS colour or None for plotly's palette; `err_low`/`err_high` the
    lower/upper ends of each point's interval for style "errorbars" (absolute values,
    not offsets)."""

    name: str
    xs: list[Any]
    ys: list[Any]
    style: str = "line"
    labels: list[str] | None = None
    color: str | None = None
    err_low: list[Any] | None = None
    err_high: list[Any] | None = None


def _ok(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and not math.isfinite(v))


def _trace(s: Series) -> go.Scatter:
    if s.style not in _STYLES:
        raise ValueError(f"style: unknown {s.style!r} (expected {', '.join(_STYLES)})")
    keep = [i for i in range(min(len(s.xs), len(s.ys))) if _ok(s.xs[i]) and _ok(s.ys[i])]
    xs = [s.xs[i] for i in keep]
    ys = [s.ys[i] for i in keep]
    text = [s.labels[i] for i in keep] if s.labels else None
    kw: dict[str, Any] = {"name": s.name, "x": xs, "y": ys}
    if text:
        kw["text"] = text
        kw["hovertemplate"] = "%{text}: (%{x}, %{y})<extra>" + escape(s.name) + "</extra>"
    if s.color:
        kw["line"] = {"color": s.color}
        kw["marker"] = {"color": s.color}
    if s.style == "step":
        if xs:
            xs, ys = [xs[0], *xs], [0.0, *ys]
        kw.update(x=xs, y=ys, mode="lines", line_shape="hv")
    elif s.style == "errorbars":
        lo = [s.err_low[i] if s.err_low and _ok(s.err_low[i]) else None for i in keep]
        hi = [s.err_high[i] if s.err_high and _ok(s.err_high[i]) else None for i in keep]
        kw.update(
            mode="markers",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [h - y if h is not None else 0 for h, y in zip(hi, ys, strict=True)],
                "arrayminus": [y - lo_ if lo_ is not None else 0 for lo_, y in zip(lo, ys, strict=True)],
            },
        )
    else:
        kw["mode"] = {"line": "lines", "linepoints": "lines+markers", "points": "markers"}[s.style]
        if text and "markers" in kw["mode"]:  # labelled points show their label beside the marker
            kw.update(mode=kw["mode"] + "+text", textposition="top left", textfont={"size": 11})
    return go.Scatter(**kw)


def chart(
    series: list[Series],
    *,
    plot_id: str,
    title: str,
    x_label: str,
    y_label: str,
    x_min: float | None = None,
    y_min: float | None = None,
    y_max: float | None = None,
    x_category: bool = False,
) -> str:
    """The HTML of one chart (module docstring): a div and its figure JSON. Axis ranges
    start at `x_min`/`y_min` and end at `y_max` when given (else plotly autoranges);
    `x_category` makes x a category axis (e.g. sweep points). Raises ValueError for an
    unknown series style."""
    traces = [_trace(s) for s in series]
    n_points = sum(len(t.x or ()) for t in traces)
    layout: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 13}},
        "height": 380,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "hovermode": "closest",
        "xaxis": {"title": {"text": x_label}, "gridcolor": "#e5e5e5", "zerolinecolor": "#bbb"},
        "yaxis": {"title": {"text": y_label}, "gridcolor": "#e5e5e5", "zerolinecolor": "#bbb"},
        "legend": {"orientation": "h", "y": -0.22},
        "plot_bgcolor": "#ffffff",
        "paper_bgcolor": "#fafafa",
    }
    if x_category:
        layout["xaxis"]["type"] = "category"
    elif x_min is not None:
        layout["xaxis"]["rangemode"] = "tozero" if x_min == 0 else "normal"
    if y_min is not None and y_max is not None:
        layout["yaxis"]["range"] = [y_min, y_max * 1.04]
    elif y_min == 0:
        layout["yaxis"]["rangemode"] = "tozero"
    if n_points == 0:
        layout["annotations"] = [
            {
                "text": "no data",
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "font": {"size": 16, "color": "#888"},
            }
        ]
    fig = go.Figure(data=traces, layout=layout)
    spec = fig.to_json(pretty=False, engine="json").replace("</", "<\\/")  # no "</script>" inside
    pid = escape(plot_id)
    return (
        f'<div class="plot" id="plot-{pid}" data-plot="{pid}" data-traces="{len(traces)}" '
        f'data-points="{n_points}"></div>'
        f'<script type="application/json" class="plot-figure" data-plot="{pid}">'
        f"{spec}</script>"
    )


def plotly_js() -> str:
    """plotly.js (minified) of the installed plotly package, for one inline <script>."""
    return plotly.offline.get_plotlyjs()


def draw_script() -> str:
    """The script that draws every chart of the page (after plotly.js is loaded)."""
    return (
        "<script>\n(function () {\n"
        "  for (const el of document.querySelectorAll('script.plot-figure')) {\n"
        "    const fig = JSON.parse(el.textContent);\n"
        "    const div = document.getElementById('plot-' + el.dataset.plot);\n"
        f"    Plotly.newPlot(div, fig.data, fig.layout, {json.dumps(_CONFIG)});\n"
        "  }\n})();\n</script>"
    )
