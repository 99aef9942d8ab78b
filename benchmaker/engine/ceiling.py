"""The stored measurement ceiling of this host: the file `benchmaker calibrate` writes
(benchmaker.recipes.calibration measures it) and what a run does with it. The engine reads it from
here; this module imports nothing of the engine, so runner.py and calibrate.py (which
runs the engine to measure) do not import each other.

    path = calibration_path()                 # $BENCHMAKER_CALIBRATION or ~/.cache/...
    load_calibration()                        # the latest one, or None
    calibration_for_manifest()                # what a run puts under manifest["calibration"]
    ceiling_checks(cal, summary["run"])       # ({"offered_rate_vs_ceiling": ...}, notes)

The file holds the latest calibration only (one JSON object, fields in
benchmaker.recipes.calibration's docstring); a run copies it into its manifest. A calibration
made on another host (same home directory over NFS) is still copied, with
`host_matches: false`, and is not used for ratios.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.errors import ConfigError

__all__ = [
    "CALIBRATION_ENV",
    "CEILING_NOTE_RATIO",
    "SCHEMA_VERSION",
    "calibration_for_manifest",
    "calibration_path",
    "ceiling_checks",
    "host_facts",
    "load_calibration",
    "write_calibration",
]

CALIBRATION_ENV = "BENCHMAKER_CALIBRATION"
SCHEMA_VERSION = 1
# offered rate at or above this share of the calibrated ceiling gets a verdict note
CEILING_NOTE_RATIO = 0.5

_REQUIRED = (
    "schema",
    "calibrated_at",
    "host",
    "max_request_rate_per_s",
    "stream_events_per_s",
    "timer",
    "loop_idle_lag_ms",
)


def calibration_path() -> Path:
    """`$BENCHMAKER_CALIBRATION` when set and non-empty, else
    `~/.cache/benchmaker/calibration.json`."""
    env = os.environ.get(CALIBRATION_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "benchmaker" / "calibration.json"


def host_facts() -> dict[str, Any]:
    """hostname, platform and cpu_count of this host (a calibration's and a manifest's `host`)."""
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu_count": os.cpu_count()}


def write_calibration(cal: dict[str, Any], path: Path | None = None) -> Path:
    """Write `cal` as indented JSON to `path` (default `calibration_path()`), creating
    the directory; temp file + rename. Returns the path."""
    path = Path(path) if path is not None else calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(cal, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
    return path


def load_calibration(path: Path | None = None) -> dict[str, Any] | None:
    """The calibration in `path` (default `calibration_path()`), or None when the file
    does not exist. Raises ConfigError `path: problem` when it is not a JSON object
    with the calibration fields (schema, calibrated_at, host, max_request_rate_per_s,
    stream_events_per_s, timer, loop_idle_lag_ms)."""
    path = Path(path) if path is not None else calibration_path()
    if not path.is_file():
        return None
    try:
        cal = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a JSON document: {exc}") from None
    if not isinstance(cal, dict):
        raise ConfigError(f"{path}: expected a JSON object (got {type(cal).__name__})")
    missing = [k for k in _REQUIRED if k not in cal]
    if missing:
        raise ConfigError(f"{path}: {missing[0]}: missing (not a benchmaker calibration file)")
    return cal


def calibration_for_manifest(path: Path | None = None) -> dict[str, Any] | None:
    """What a run stores under manifest["calibration"]: the latest calibration plus
    `path` and `host_matches` (its hostname is this host's); None when there is none;
    `{"path": ..., "error": ...}` when the file is unreadable (a run never fails for it)."""
    path = Path(path) if path is not None else calibration_path()
    try:
        cal = load_calibration(path)
    except ConfigError as exc:
        return {"path": str(path), "error": str(exc)}
    if cal is None:
        return None
    h = cal.get("host")
    host: dict[str, Any] = h if isinstance(h, dict) else {}
    return {**cal, "path": str(path), "host_matches": host.get("hostname") == socket.gethostname()}


def ceiling_checks(calibration: dict[str, Any] | None, run: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """Self-check entries relating a run to this host's ceiling, and verdict notes.

    Returns ({"offered_rate_vs_ceiling": float|None, "ceiling_req_per_s": float|None,
    "calibrated_at": str|None}, notes). The ratio is the run's offered rate
    (summary `offered_rate_per_s`, else `achieved_send_rate_per_s`) / the calibrated
    `max_request_rate_per_s`; None without a usable calibration (none, unreadable,
    another host) or a rate. A note when the ratio is >= CEILING_NOTE_RATIO (0.5): the
    client itself may then shape the latencies. Notes never invalidate a run.
    """
    checks: dict[str, Any] = {"offered_rate_vs_ceiling": None, "ceiling_req_per_s": None, "calibrated_at": None}
    notes: list[str] = []
    if not calibration or "error" in calibration or calibration.get("host_matches") is False:
        return checks, notes
    ceiling = calibration.get("max_request_rate_per_s")
    checks["ceiling_req_per_s"] = ceiling
    checks["calibrated_at"] = calibration.get("calibrated_at")
    rate = None
    if run:
        rate = run.get("offered_rate_per_s") or run.get("achieved_send_rate_per_s")
    if rate and ceiling:
        ratio = rate / ceiling
        checks["offered_rate_vs_ceiling"] = ratio
        if ratio >= CEILING_NOTE_RATIO:
            notes.append(
                f"offered rate {rate:,.0f} req/s is {ratio:.0%} of this host's calibrated ceiling "
                f"({ceiling:,.0f} req/s): client limits may shape the latencies"
            )
    return checks, notes
