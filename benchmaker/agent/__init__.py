"""The agent side of an episode: the harness that plays a trajectory's turns, the model
client that sends them, the tools run in a sandbox (local or Flash), the verifier that
grades the task's copy, and the records of an episode.
It imports benchmaker.trajectories, benchmaker.apis and benchmaker.engine.
"""

from benchmaker.lazy_exports import lazy_getattr

_EXPORTS = {
    "run_episode": "benchmaker.agent.harness",
    "EpisodeResult": "benchmaker.agent.harness",
    "ModelClient": "benchmaker.agent.model_client",
    "TaskSpec": "benchmaker.agent.verifier",
    "TurnRecord": "benchmaker.agent.episodes",
    "Episode": "benchmaker.agent.episodes",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
