"""Test and benchmark helpers: a scriptable OpenAI-compatible scenario server.

    from benchmaker.testing import Scenario, ScenarioServer
"""

from benchmaker.testing.scenario_server import Scenario, ScenarioServer, ToolCallScript

__all__ = ["Scenario", "ScenarioServer", "ToolCallScript"]
