"""The replay server: it serves each recorded turn back to the agent that asks for it
(the store keyed by the request, the latency models, the HTTP app), starts it as a
process, and records a live model's answers into trajectories (the recorder).
It imports benchmaker.trajectories, benchmaker.apis and benchmaker.engine.
"""

from benchmaker.lazy_exports import lazy_getattr

_EXPORTS = {
    "ReplayStore": "benchmaker.replay_server.store",
    "create_app": "benchmaker.replay_server.server",
    "serve": "benchmaker.replay_server.server",
    "parse_latency": "benchmaker.replay_server.latency",
    "start_replay_server": "benchmaker.replay_server.process",
    "ReplayServerHandle": "benchmaker.replay_server.process",
    "Recorder": "benchmaker.replay_server.recorder",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
