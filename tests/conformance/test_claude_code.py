"""The real Claude Code (`@anthropic-ai/claude-code` from npm) against our Anthropic
Messages path: recorded through `benchmaker record` in front of a replay server that
plays a written two-turn script (a Bash tool call, then an answer), its own session file
converted (claude-code), and the real binary replayed against that conversion under
`--divergence content`: the task's file written each time, the recorded 2 turns, 0
misses, 0 divergences.

The binary: $BENCHMAKER_CLAUDE, else the one `conformance/setup_venvs.sh claude` installs
under the conformance cache (<cache>/claude/bin/claude); a failed install fails the test
with its reason. Each run gets its own HOME and working folder; non-essential traffic off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from conformance.clients import url_process
from conformance.venvs import venv_bin
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: runs under make conformance (conftest)
BENCHMAKER = str(Path(sys.executable).with_name("benchmaker"))
PROMPT = "task_id: cc-demo\nWrite hello to out.txt"


def _claude() -> str:
    if os.environ.get("BENCHMAKER_CLAUDE"):
        return os.environ["BENCHMAKER_CLAUDE"]
    need("claude")
    return str(venv_bin("claude", "claude"))


def _script(path: Path) -> Path:
    traj = {
        "trajectory_id": "cc-script",
        "source": {"format": "test", "path": "inline", "sha256": "0"},
        "match_key": "task:cc-demo",
        "model": "claude-opus-5-5",
        "first_user": PROMPT,
        "turns": [
            {
                "index": 0,
                "response": {
                    "content": "I'll write the file.",
                    "reasoning": "Use Bash.",
                    "tool_calls": [
                        {
                            "id": "toolu_01ABC",
                            "name": "Bash",
                            "arguments_raw": '{"command": "echo hello > out.txt", "description": "Write hello"}',
                            "arguments": {"command": "echo hello > out.txt", "description": "Write hello"},
                        }
                    ],
                    "finish_reason": "tool_calls",
                },
                "usage": {"prompt_tokens": 5000, "completion_tokens": 30, "cached_tokens": 4000},
            },
            {
                "index": 1,
                "response": {"content": "Done: out.txt holds hello.", "finish_reason": "stop"},
                "usage": {"prompt_tokens": 5100, "completion_tokens": 8, "cached_tokens": 5000},
            },
        ],
    }
    path.write_text(json.dumps(traj) + "\n")
    return path


def _run_claude(claude: str, base_url: str, root: Path, log: Path) -> dict:
    home, work = root / "home", root / "work"
    home.mkdir(parents=True)
    work.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "IS_SANDBOX": "1",
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    done = subprocess.run(
        [claude, "-p", PROMPT, "--dangerously-skip-permissions", "--output-format", "json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (work / "out.txt").read_text() == "hello\n"
    return json.loads(done.stdout)


def _get(url: str, method: str = "GET") -> dict:
    req = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def test_claude_code_records_converts_and_replays_with_zero_misses(tmp_path, out_dir):
    claude = _claude()
    script = _script(tmp_path / "script.jsonl")
    recorded = tmp_path / "recorded.jsonl"
    with (
        url_process([BENCHMAKER, "serve-replay", str(script), "--port", "0"], log=out_dir / "cc-upstream.log") as up,
        url_process(
            [BENCHMAKER, "record", "--upstream", up, "-o", str(recorded)], log=out_dir / "cc-record.log"
        ) as rec,
    ):
        first = _run_claude(claude, rec, tmp_path / "a", out_dir / "cc-record-agent.log")
        flushed = _get(rec + "/flush", "POST")
        upstream_stats = _get(up + "/stats")
    assert (first["result"], first["num_turns"], first["is_error"]) == ("Done: out.txt holds hello.", 2, False)
    assert (flushed["trajectories"], flushed["turns"], flushed["skipped"]) == (1, 2, {})
    assert upstream_stats["misses"]["total"] == 0 and upstream_stats["requests_by_api"] == {"messages": 2}

    (session,) = (tmp_path / "a" / "home" / ".claude" / "projects").glob("*/*.jsonl")
    converted = tmp_path / "converted.jsonl"
    done = subprocess.run([BENCHMAKER, "convert", str(session), "-o", str(converted)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (traj,) = [json.loads(x) for x in converted.read_text().splitlines()]
    (rec_traj,) = [json.loads(x) for x in recorded.read_text().splitlines()]
    assert traj["source"]["format"] == "claude-code" and traj["match_key"] == "task:cc-demo"
    assert [t["response"] for t in traj["turns"]] == [t["response"] for t in rec_traj["turns"]]

    with url_process(
        [BENCHMAKER, "serve-replay", str(converted), "--port", "0", "--divergence", "content"],
        log=out_dir / "cc-replay.log",
    ) as replay:
        again = _run_claude(claude, replay, tmp_path / "b", out_dir / "cc-replay-agent.log")
        stats = _get(replay + "/stats")
    assert (again["result"], again["num_turns"]) == ("Done: out.txt holds hello.", 2)
    assert (stats["served"], stats["served_stream"], stats["misses"]["total"], stats["divergences"]["total"]) == (
        2,
        2,
        0,
        0,
    )
