"""Trajectories: the schema every recorded agent run is converted to (one turn per model
call), the converters that read each agent's own logs (detected by content), the
conversion with its cache key, and the context edits that rebuild a turn's request.
It imports only benchmaker.progress (and pydantic); the engine and the wire APIs below it
are open to it.
"""

from benchmaker.lazy_exports import lazy_getattr

_EXPORTS = {
    "Trajectory": "benchmaker.trajectories.trajectory",
    "Turn": "benchmaker.trajectories.trajectory",
    "convert_paths": "benchmaker.trajectories.convert",
    "load_trajectories": "benchmaker.trajectories.convert",
    "read_trajectories": "benchmaker.trajectories.convert",
    "detect_format": "benchmaker.trajectories.convert",
    "InputError": "benchmaker.trajectories.errors",
    "ConvertError": "benchmaker.trajectories.errors",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
