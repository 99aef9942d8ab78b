"""The report opened in headless Chromium (Debian package `chromium`, /usr/bin/chromium),
offline: every plotly chart is laid out with its series drawn (measured by the browser:
lines with a length, one marker per point), no page error or console.error, and a
screenshot shows coloured ink inside every plot's box.

Chromium is started with no network services (--disable-background-networking, ...,
and every host name mapped to NOTFOUND) and a throw-away profile. Skipped when
/usr/bin/chromium is absent (install: `apt-get install -y chromium`).
"""

from __future__ import annotations

import html as _html
import json
import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from benchmaker.warehouse.loader import load_run
from benchmaker.warehouse.report import write_report
from tests.warehouse._bundle import reference_bundle
from tests.warehouse.test_report import sweep_bundle

CHROMIUM = Path("/usr/bin/chromium")
WINDOW = (1300, 2600)  # px; tall enough for every panel of the sweep report

pytestmark = pytest.mark.skipif(
    not CHROMIUM.is_file(), reason="/usr/bin/chromium absent (Debian: apt-get install -y chromium)"
)

# First thing in <head>: records uncaught errors and console.error calls (plotly reports
# bad figures there) before any other script runs.
_ERROR_HOOK = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push("error: " + e.message));
window.addEventListener("unhandledrejection", e => window.__errors.push("rejection: " + e.reason));
(function () { const ce = console.error; console.error = function (...a) {
  window.__errors.push("console.error: " + a.join(" ")); ce.apply(console, a); }; })();
</script>"""

# Runs at the end of <body>, after the charts are drawn (a timer: Chromium's virtual time
# budget lets it fire before the DOM is dumped): measures every plotly chart as laid out
# and writes the result as JSON into <pre id="render-check">.
_PROBE = """
<script>
setTimeout(function () {
  const out = [];
  for (const gd of document.querySelectorAll("div.plot")) {
    const r = gd.getBoundingClientRect();
    const bg = gd.querySelector(".bglayer .bg") || gd.querySelector(".nsewdrag");
    const area = bg ? bg.getBoundingClientRect() : {left: 0, top: 0, width: 0, height: 0};
    const series = [];
    const drawn = gd.querySelectorAll(".scatterlayer .trace");
    (gd._fullData || []).forEach((t, i) => {
      const g = drawn[i];
      const line = g ? g.querySelector("path.js-line") : null;
      const points = g ? [...g.querySelectorAll("path.point")].filter(p => {
        const b = p.getBoundingClientRect(); return b.width > 0 && b.height > 0; }) : [];
      const bars = g ? g.querySelectorAll(".errorbar").length : 0;
      series.push({name: t.name, points: (t.x || []).length, mode: t.mode, labels: t.text || null,
                   path_length: line ? line.getTotalLength() : null,
                   markers_drawn: points.length, errorbars: bars});
    });
    out.push({plot: gd.dataset.plot, x: r.left + window.scrollX, y: r.top + window.scrollY,
              width: r.width, height: r.height, series: series,
              area: {x: area.left + window.scrollX, y: area.top + window.scrollY,
                     width: area.width, height: area.height}});
  }
  const pre = document.createElement("pre");
  pre.id = "render-check";
  const v = document.querySelector("[data-section=verdict]");
  const vr = v ? v.getBoundingClientRect() : null;
  const verdict = v ? {y: vr.top + window.scrollY, height: vr.height, text: v.innerText} : null;
  const empty = [...document.querySelectorAll("section.panel")].filter(p => !p.querySelector("div.plot"))
    .map(p => p.dataset.panel);
  pre.textContent = JSON.stringify({plots: out, errors: window.__errors, verdict: verdict, empty_panels: empty});
  document.body.appendChild(pre);
}, 200);
</script>
"""


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--virtual-time-budget=15000",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


def _instrumented_report(tmp_path: Path, run_dir: Path) -> Path:
    db = tmp_path / "w.duckdb"
    run_id = load_run(db, run_dir).run_id
    out = write_report(db, run_id, tmp_path / "report.html")
    probed = tmp_path / "report-probed.html"
    page = out.read_text(encoding="utf-8").replace("<head>", "<head>" + _ERROR_HOOK, 1)
    probed.write_text(page.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    return probed


def _page_check(tmp_path: Path, page: Path) -> dict:
    """What the probe measured: `plots` (every chart as laid out), `verdict` (the
    verdict section's position and text, None without one), `empty_panels` (panels
    without a chart); fails on any page error or console.error."""
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    m = re.search(r'<pre id="render-check">(.*?)</pre>', dom, re.S)
    assert m, "the probe did not run: " + dom[-500:]
    check = json.loads(_html.unescape(m.group(1)))
    assert check["errors"] == [], check["errors"]
    return check


def _render_check(tmp_path: Path, page: Path) -> list[dict]:
    """Every chart as laid out; fails on any page error or console.error."""
    return _page_check(tmp_path, page)["plots"]


def _png_rgb(path: Path) -> tuple[int, int, list[bytes], int]:
    """Decode an 8-bit, non-interlaced RGB/RGBA PNG (what Chromium writes): (width,
    height, unfiltered rows, bytes per pixel). Filters: PNG spec (ISO/IEC 15948) §9."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def _coloured_pixels(rows: list[bytes], bpp: int, box: dict) -> int:
    """Pixels inside `box` whose colour is saturated (max - min channel > 60): series ink,
    not the white background, grey grid, or black text."""
    n = 0
    x0, x1 = int(box["x"]), int(box["x"] + box["width"])
    for y in range(int(box["y"]), int(box["y"] + box["height"])):
        row = rows[y]
        for x in range(x0, x1):
            r, g, b = row[x * bpp], row[x * bpp + 1], row[x * bpp + 2]
            if max(r, g, b) - min(r, g, b) > 60:
                n += 1
    return n


SWEEP_PLOTS = {
    "throughput",
    "latency-throughput",
    "ttft-cdf",
    "itl-cdf",
    "resolved-concurrency",
    "schedule-lag",
    "in-flight",
    "concurrency-target",
}


def test_every_plot_of_a_sweep_report_is_drawn_in_chromium(tmp_path):
    page = _instrumented_report(tmp_path, sweep_bundle(tmp_path / "sweep-1"))
    check = _render_check(tmp_path, page)
    assert {c["plot"] for c in check} == SWEEP_PLOTS
    for chart in check:
        assert chart["width"] > 300 and chart["height"] > 200, chart["plot"]
        assert chart["area"]["width"] > 100 and chart["area"]["height"] > 100, chart["plot"]
        assert chart["series"], chart["plot"]
        for s in chart["series"]:
            where = f"{chart['plot']}/{s['name']}"
            assert s["points"] > 0, where
            if "lines" in s["mode"]:
                assert s["path_length"] and s["path_length"] > 0, where
            if "markers" in s["mode"]:
                assert s["markers_drawn"] == s["points"], where  # every point has a box
    by_plot = {c["plot"]: {s["name"]: s for s in c["series"]} for c in check}
    # one marker per sweep point (c1, c2, c4) for latency vs throughput and resolved rate
    assert by_plot["latency-throughput"]["e2e p99"]["markers_drawn"] == 3
    assert by_plot["resolved-concurrency"]["carried"]["markers_drawn"] == 3
    assert by_plot["throughput"]["requests/s"]["markers_drawn"] == 3
    assert by_plot["ttft-cdf"]["c4 (n=24)"]["points"] == 25  # 4 workers x 2 episodes x 3 turns, and y = 0


def test_screenshot_has_series_ink_inside_every_plot(tmp_path):
    page = _instrumented_report(tmp_path, sweep_bundle(tmp_path / "sweep-1"))
    check = _render_check(tmp_path, page)
    shot = tmp_path / "shot.png"
    _chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    width, height, rows, bpp = _png_rgb(shot)
    assert (width, height) == WINDOW
    for chart in check:
        assert chart["y"] + chart["height"] <= height, f"{chart['plot']} below the screenshot"
        inked = _coloured_pixels(rows, bpp, chart["area"])  # inside the axes: no legend
        assert inked > 150, chart["plot"]
    # the page outside the plots (the tables' header) has no series colour: the count
    # above measures drawn series, not a tinted page
    top = {"x": 0, "y": 0, "width": width, "height": min(c["y"] for c in check) - 1}
    assert _coloured_pixels(rows, bpp, top) == 0


def test_a_run_without_episodes_renders_its_plots_and_notes(tmp_path):
    page = _instrumented_report(tmp_path, reference_bundle(tmp_path / "run-a"))
    check = _render_check(tmp_path, page)
    assert {c["plot"] for c in check} == {"latency-throughput", "ttft-cdf", "itl-cdf", "schedule-lag", "in-flight"}
    for chart in check:
        for s in chart["series"]:
            if "lines" in s["mode"]:
                assert s["path_length"] > 0, f"{chart['plot']}/{s['name']}"


def test_a_sweep_report_opens_with_its_verdict_labelled_points_and_no_empty_card(tmp_path):
    page = _instrumented_report(tmp_path, sweep_bundle(tmp_path / "sweep-1"))
    check = _page_check(tmp_path, page)
    verdict = check["verdict"]
    # first, in the first screen (above every plot, within the window's first 1000 px)
    assert verdict is not None and verdict["y"] + verdict["height"] < min(c["y"] for c in check["plots"])
    assert verdict["y"] + verdict["height"] < 1000
    lines = verdict["text"].splitlines()
    assert lines[0].startswith("Verdict: ") and lines[0].endswith(" of 3 points valid")
    assert [line.split("\t")[0] for line in lines if line.startswith("c")] == ["c1", "c2", "c4"]
    by_plot = {c["plot"]: {s["name"]: s for s in c["series"]} for c in check["plots"]}
    labels = by_plot["latency-throughput"]["e2e p99"]["labels"]
    assert [label.split(" ")[0] for label in labels] == ["c1", "c2", "c4"]  # "(invalid)" after an invalid one
    assert check["empty_panels"] == []
