"""The real opencode (npm `opencode-ai`, chat completions through `@ai-sdk/openai-compatible`,
streamed) end to end: it solves examples/mswea-task against the scripted model
(conformance/scripted_model.py playing conformance/pi_script.json) with `benchmaker
record` in between; its session export (`opencode export`) converts to the recorded
turns; then `benchmaker swebench-replay --mode command` runs the real opencode against
the recording at concurrency 1 and 4: 0 misses, 0 divergences under `--divergence
content`, the recorded 5 turns in every episode, the task resolved in every episode.
opencode's title request (no tools, its `small_model`, the task repeated) is no turn of
its session: the recorder relays it without recording it (`title_request`; the scripted
model refuses it, no `bash` tool: `upstream_errors`), and on
replay the replay server answers it as side traffic, which command mode does not count
as a turn.
"""

from __future__ import annotations

import sys

import pytest

from conformance.clients import check_session_log, record_agent
from conformance.command_replay import assert_clean_replay, replay_in_command_mode
from conformance.opencode_agent import opencode_prefix
from conformance.venvs import REPO
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs opencode under the conformance cache (conftest)
TASK = REPO / "examples" / "mswea-task"
SCRIPT = REPO / "conformance" / "pi_script.json"
AGENT = REPO / "conformance" / "opencode_agent.py"


@pytest.fixture(scope="module")
def recording(tmp_path_factory, out_dir):
    """opencode once through `benchmaker record` in front of the scripted model; returns
    (trajectories.jsonl, the session export, the workdir)."""
    need("opencode")
    tmp = tmp_path_factory.mktemp("opencode")
    argv = [sys.executable, str(AGENT), "--task-file", "ISSUE.md", "--export-dir", str(tmp / "exports")]
    flushed, rec, workdir = record_agent(argv, task=TASK, script=SCRIPT, tmp=tmp, out_dir=out_dir, name="opencode")
    assert (flushed["trajectories"], flushed["turns"], flushed["skipped"]) == (
        1,
        5,
        {"title_request": 1, "upstream_errors": 1},
    )
    (export,) = (tmp / "exports").glob("ses_*.json")
    return rec, export, workdir


def test_opencode_solves_the_task_and_its_export_converts_to_the_recorded_turns(recording):
    rec, export, workdir = recording
    _, recorded = check_session_log(export, rec, workdir, fmt="opencode", script=SCRIPT)
    assert len(recorded.turns) == 5


def test_command_mode_replay_of_opencode_has_no_misses(recording, tmp_path, out_dir):
    rec, _, _ = recording
    command = (
        f"{sys.executable} {AGENT} --base-url {{base_url}} --task-file {{workdir}}/ISSUE.md "
        f"--opencode {opencode_prefix()}"
    )
    rows = replay_in_command_mode(
        agent="opencode",
        api="openai-completions",
        trajectories=rec,
        command=command,
        task_dir=TASK,
        tmp=tmp_path,
        out_dir=out_dir,
    )
    assert_clean_replay(rows, turns=5)
