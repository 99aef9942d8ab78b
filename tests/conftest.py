"""Suite-wide isolation: no test reads this machine's real calibration file."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_host_calibration(tmp_path_factory, monkeypatch):
    """Point BENCHMAKER_CALIBRATION at a file that does not exist (tests that calibrate
    set their own path), so a developer's ~/.cache calibration never leaks into runs."""
    monkeypatch.setenv("BENCHMAKER_CALIBRATION", str(tmp_path_factory.getbasetemp() / "no-calibration.json"))
