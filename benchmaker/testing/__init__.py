"""Test and benchmark helpers: a scriptable OpenAI-compatible scenario server.

    from benchmaker.testing import Scenario, ScenarioServer

Names are imported lazily so `python -m benchmaker.testing.scenario_server` runs the
module once (no runpy "found in sys.modules" warning).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Scenario", "ScenarioServer", "ToolCallScript"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from benchmaker.testing import scenario_server

        return getattr(scenario_server, name)
    raise AttributeError(f"module 'benchmaker.testing' has no attribute {name!r}")
