"""benchmaker.engine.ceiling: the stored calibration the engine reads, without importing the
module that measures it (benchmaker.recipes.calibration runs the engine: no import loop)."""

from __future__ import annotations

import subprocess
import sys

from benchmaker.engine import ceiling
from benchmaker.recipes import calibration as calibrate


def test_the_engine_does_not_import_the_calibration_run() -> None:
    code = "import sys, benchmaker.engine.runner; print('benchmaker.recipes.calibration' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_calibrate_reexports_the_stored_calibration_functions() -> None:
    for name in (
        "calibration_for_manifest",
        "calibration_path",
        "ceiling_checks",
        "load_calibration",
        "write_calibration",
    ):
        assert getattr(calibrate, name) is getattr(ceiling, name)


def test_ceiling_ratio_and_note_for_a_rate_near_the_ceiling() -> None:
    cal = {"max_request_rate_per_s": 1000.0, "calibrated_at": "t", "host_matches": True}
    checks, notes = ceiling.ceiling_checks(cal, {"offered_rate_per_s": 600.0})
    assert checks == {"offered_rate_vs_ceiling": 0.6, "ceiling_req_per_s": 1000.0, "calibrated_at": "t"}
    assert notes == [
        "offered rate 600 req/s is 60% of this host's calibrated ceiling (1,000 req/s): "
        "client limits may shape the latencies"
    ]  # 600 / 1000 >= CEILING_NOTE_RATIO 0.5
