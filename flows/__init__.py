"""Prefect flows, one module per pipeline (docs/architecture.md): `swebench_replay` (flow
"swebench-replay", the main job) and `llm_sweep` (flow "llm-sweep"); `benchmaker.flows.retry`
resumes a failed run of either under its own flow run id. Both run here or, with
`sharded`, every sweep point as shards on several load hosts (their shard flows:
benchmaker.flows.swebench_replay_shard, benchmaker.flows.llm_sweep_shard; where the
shards run: benchmaker.tasks.shard_runs).

The two flows are imported on first access (PEP 562): `benchmaker swebench-replay`
imports benchmaker.flows.swebench_replay without the llm-sweep flow and its engine tasks.
(Once a flow's module is imported, `flows.<name>` is that module, as for any package.)"""

from typing import TYPE_CHECKING

from benchmaker.lazy_exports import lazy_getattr

_EXPORTS = {"llm_sweep": "benchmaker.flows.llm_sweep", "swebench_replay": "benchmaker.flows.swebench_replay"}

if TYPE_CHECKING:  # the names for type checkers and editors
    from benchmaker.flows.llm_sweep import llm_sweep
    from benchmaker.flows.swebench_replay import swebench_replay

__getattr__ = lazy_getattr(__name__, _EXPORTS)

__all__ = ["llm_sweep", "swebench_replay"]
