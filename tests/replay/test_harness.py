"""benchmaker.agent.harness: episodes against the real replay server (recorded mode, real
recordings), the concurrency proof, usage coverage, command mode, JSONL columns."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import duckdb
import pytest

from benchmaker.agent.episodes import EPISODE_COLUMNS, TURN_COLUMNS
from benchmaker.agent.harness import concurrency_proof, initial_messages, local_sandbox_factory, run_episode
from benchmaker.agent.verifier import load_task
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import play_episodes
from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.trajectory import Trajectory

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / ".." / "shared" / "data" / "real"
RECORDING = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"
TASK_DIR = ROOT / "examples" / "tiny-task"


def _example() -> Trajectory:
    (t,) = list(iter_trajectories(RECORDING))
    return t


def _write(trajs: list[Trajectory], path: Path) -> Path:
    path.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
    return path


@pytest.mark.parametrize(
    "name", ["swe-agent-pydicom-1458.traj", "mini-swe-agent-github-issue.traj.json", "openhands-basic.traj.json"]
)
async def test_real_recordings_replay_byte_equal_with_zero_misses(tmp_path: Path, name: str):
    src = REAL / name
    if not src.exists():
        pytest.skip(f"{src} absent")
    trajs = list(iter_trajectories(src))
    with start_replay_server(_write(trajs, tmp_path / "t.jsonl"), divergence="content") as srv:
        played = await play_episodes(
            trajs,
            srv.url,
            tmp_path / "out",
            ReplayPoint(load="closed:1"),
            run_id="real",
            sweep_point="c1",
            keep_results=True,
        )
        stats = srv.stats()
    (res,) = played.workload.results
    ep = res.episode
    assert (ep.outcome, ep.error) == ("ok", None)
    assert ep.n_turns == len(trajs[0].turns) == ep.n_requests
    assert (ep.misses_unknown_key, ep.misses_beyond_turns, ep.misses_diverged, ep.divergences) == (0, 0, 0, 0)
    assert all(t.byte_equal for t in res.turns)
    assert stats["misses"]["total"] == 0 and stats["divergences"]["total"] == 0


def test_initial_messages_send_user_before_turns_after_first_user():
    traj = _example().model_copy(
        update={"system": "sys", "first_user": "demo", "user_before_turns": ["task prompt", "more"]}
    )
    assert initial_messages(traj) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "demo"},
        {"role": "user", "content": "task prompt"},
        {"role": "user", "content": "more"},
    ]


@pytest.mark.slow  # ~7 s: 453 requests whose message lists grow to the whole session
async def test_pi_session_has_453_turns_and_usage_gaps_make_totals_null(tmp_path: Path):
    src = REAL / "pi-session-v1-large.jsonl"
    if not src.exists():
        pytest.skip(f"{src} absent")
    (traj,) = list(iter_trajectories(src))
    with start_replay_server(_write([traj], tmp_path / "t.jsonl"), divergence="content") as srv:
        res = await run_episode(traj, srv.url, mode="recorded")
        stats = srv.stats()
    assert res.episode.n_turns == 453  # SOURCES.md: 453 assistant turns
    assert (res.episode.outcome, res.episode.misses_diverged, stats["misses"]["total"]) == ("ok", 0, 0)
    assert all(t.byte_equal for t in res.turns)
    # the aborted turns replay as what they were (finish_reason aborted, flagged by the
    # server's x-replay-recorded-error): outcome recorded_error, each of them
    n_failed = sum(1 for t in traj.turns if t.response.finish_reason in ("aborted", "error"))
    assert sum(1 for c in res.calls if c.outcome == "recorded_error") == n_failed > 0
    # aborted/error turns with all-zero usage are converted to usage None: no totals
    n_missing = sum(1 for t in traj.turns if t.usage is None)
    assert n_missing > 0
    assert sum(1 for c in res.calls if c.prompt_tokens is None) == n_missing
    assert (res.episode.usage_complete, res.episode.prompt_tokens, res.episode.output_tokens) == (False, None, None)


async def test_concurrency_5_on_the_engine_overlaps_and_files_match_contract_columns(tmp_path: Path):
    traj = _example()
    with start_replay_server(_write([traj], tmp_path / "t.jsonl"), latency="fixed:50:1") as srv:
        played = await play_episodes(
            [traj] * 5,
            srv.url,
            tmp_path / "p5",
            ReplayPoint(load="closed:5"),
            run_id="r1",
            sweep_point="c5",
            keep_results=True,
        )
    results = played.workload.results
    proof = concurrency_proof([(r.episode.started_ns, r.episode.ended_ns) for r in results], 5)
    # 5 episodes of 4 turns x >= 50 ms TTFT each: all 5 started long before any finished
    assert (proof.max_in_flight, proof.all_started_before_first_finish, proof.valid) == (5, True, True)
    # the engine saw the same: 5 episodes in flight, a valid closed-loop run
    engine = played.engine_summary
    assert (engine["run"]["max_concurrency"], engine["target"]["target_concurrency"]) == (5, 5)
    # (the suite's host-load limits, tests/conftest.py, keep a busy host's loop lag out of it)
    assert engine["verdict"]["reasons"] == []
    assert sorted(r.episode.worker for r in results) == [0, 1, 2, 3, 4]  # slots of the 5 in flight
    for r in results:
        # model time: 4 turns with >= 50 ms TTFT each, and never more than the episode's span
        assert 200_000_000 <= r.episode.model_time_ns <= r.episode.ended_ns - r.episode.started_ns
    con = duckdb.connect()
    eps = con.execute(
        f"SELECT episode_id, n_turns, usage_complete, prompt_tokens FROM read_json('{tmp_path}/p5/episodes.jsonl', "
        f"columns={EPISODE_COLUMNS!r}, format='newline_delimited') ORDER BY episode_id"
    ).fetchall()
    assert eps == [(f"c5-{i}", 4, True, 2530) for i in range(5)]
    n = con.execute(
        f"SELECT count(*), bool_and(byte_equal) FROM read_json('{tmp_path}/p5/turns.jsonl', "
        f"columns={TURN_COLUMNS!r}, format='newline_delimited')"
    ).fetchone()
    assert n == (20, True)  # 5 episodes x 4 turns


def test_serial_executor_fails_the_concurrency_proof():
    serial = [(0, 10), (10, 20), (20, 30)]  # one after the other
    p = concurrency_proof(serial, 3)
    assert (p.max_in_flight, p.all_started_before_first_finish, p.valid) == (1, False, False)
    assert p.reason == "max episodes in flight 1 < target 3; only 1 of 3 episodes started before the first finished"
    staggered = [(0, 100), (5, 30), (40, 120)]  # 2 overlap at most; the 3rd starts after one finished
    q = concurrency_proof(staggered, 3)
    assert (q.max_in_flight, q.valid) == (2, False)
    ok = concurrency_proof([(0, 50), (1, 60), (2, 70)], 3)
    assert (ok.max_in_flight, ok.valid, ok.reason) == (3, True, None)


async def test_one_call_without_usage_makes_totals_null_never_partial(tmp_path: Path):
    traj = _example()
    traj.turns[1].usage = None
    with start_replay_server(_write([traj], tmp_path / "t.jsonl")) as srv:
        res = await run_episode(traj, srv.url, mode="recorded")
    ep = res.episode
    assert [c.prompt_tokens for c in res.calls] == [412, None, 600, 636]  # input + cacheRead per turn
    assert (ep.usage_complete, ep.prompt_tokens, ep.output_tokens) == (False, None, None)


async def test_unknown_task_is_an_unknown_key_miss(tmp_path: Path):
    traj = _example()
    other = traj.model_copy(deep=True)
    other.first_user = "task_id: not-recorded\nhello"
    other.match_key = "task:not-recorded"
    with start_replay_server(_write([traj], tmp_path / "t.jsonl")) as srv:
        res = await run_episode(other, srv.url, mode="recorded")
    ep = res.episode
    assert (ep.outcome, ep.misses_unknown_key, ep.n_turns, ep.n_requests) == ("error", 1, 0, 1)
    assert res.calls[0].status == 404 and res.turns[0].miss_kind == "unknown_key"
    assert ep.first_token_ns_sum is None


_AGENT = (Path(__file__).parent / "fixtures" / "tiny_task_agent.py").read_text()  # DIVERGE, RETRY, STRAYS unset


async def test_command_mode_agent_gets_no_prefect_secret_nor_replay_token(tmp_path: Path, monkeypatch):
    seen = tmp_path / "env.json"
    agent = tmp_path / "agent.py"
    agent.write_text(
        f"import json, os\njson.dump({{k: os.environ.get(k) for k in ('PREFECT_API_AUTH_STRING', "
        f"'PREFECT_API_KEY', 'BENCHMAKER_REPLAY_TOKEN', 'OPENAI_BASE_URL')}}, open({str(seen)!r}, 'w'))\n" + _AGENT
    )
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "benchmaker:S3CRET")
    monkeypatch.setenv("PREFECT_API_KEY", "pnu_S3CRET")
    monkeypatch.setenv("BENCHMAKER_REPLAY_TOKEN", "S3CRET")
    traj = _example()
    # unconfined (--sandbox none): the agent runs on this host with this process's
    # environment, less the secrets (a confined agent gets the sandbox's environment only)
    with start_replay_server(_write([traj], tmp_path / "t.jsonl"), divergence="content") as srv:
        res = await run_episode(
            traj,
            srv.url,
            mode="command",
            sandbox=local_sandbox_factory(confined=False),
            task=load_task(TASK_DIR),
            command=[sys.executable, str(agent)],
        )
    assert res.episode.outcome == "ok"
    env = json.loads(seen.read_text())
    assert env.pop("OPENAI_BASE_URL").startswith("http://127.0.0.1:")
    assert env == {"PREFECT_API_AUTH_STRING": None, "PREFECT_API_KEY": None, "BENCHMAKER_REPLAY_TOKEN": None}


async def test_command_mode_runs_an_external_agent_through_the_measuring_proxy(tmp_path: Path):
    (tmp_path / "agent").mkdir(mode=0o755)  # readable by the confined agent's user (root: benchmaker-sandbox)
    os.chmod(tmp_path / "agent", 0o755)
    agent = tmp_path / "agent" / "agent.py"
    agent.write_text(_AGENT)
    traj = _example()
    with start_replay_server(_write([traj], tmp_path / "t.jsonl"), divergence="content") as srv:
        res = await run_episode(
            traj,
            srv.url,
            mode="command",
            sandbox=local_sandbox_factory(),
            task=load_task(TASK_DIR),
            command=[sys.executable, str(agent)],
        )
    ep = res.episode
    assert (ep.outcome, ep.error) == ("ok", None)
    assert (ep.n_requests, ep.n_turns, ep.misses_diverged) == (4, 4, 0)  # read, edit, bash, final
    assert (ep.resolved, ep.reverified) == (True, True)  # the agent's edit fixed the workspace
    assert ep.usage_complete is True and ep.prompt_tokens == 2530
    assert ep.model_time_ns > 0
    assert [t.turn_index for t in res.turns] == [0, 1, 2, 3]


def test_episode_cli_resolves_the_example_in_execute_mode(tmp_path: Path, capsys):
    from benchmaker.recipes.cli import main

    with start_replay_server(_write([_example()], tmp_path / "t.jsonl"), divergence="content") as srv:
        code = main(
            [
                "episode",
                str(RECORDING),
                "--url",
                srv.url,
                "--mode",
                "execute",
                "--workdir",
                str(TASK_DIR),
                "--out",
                str(tmp_path / "ep"),
            ]
        )
        bad = main(["episode", str(RECORDING), "--url", srv.url, "--mode", "execute"])
    assert (code, bad) == (0, 2)  # 2: execute without --workdir is bad input
    record = json.loads((tmp_path / "ep" / "episodes.jsonl").read_text())
    assert (record["outcome"], record["resolved"], record["reverified"], record["n_turns"]) == ("ok", True, True, 4)
    assert "--workdir: mode execute needs a task directory" in capsys.readouterr().err


def test_byte_equal_compares_content_reasoning_and_each_tool_call_exactly():
    from benchmaker.agent.harness import byte_equal
    from benchmaker.agent.model_client import ChatResult, ToolCallDelta
    from benchmaker.trajectories.trajectory import Response, ToolCall

    rec = Response(
        content=None,
        reasoning="",
        tool_calls=[
            ToolCall(id="c1", name="bash", arguments_raw='{"cmd": "ls"}'),
            ToolCall(id="c2", name="read", arguments_raw="{}"),
        ],
    )

    def got(calls: list[tuple[str | None, str, str]], content: str | None = None, reasoning: str | None = None):
        return ChatResult(
            content=content,
            reasoning=reasoning,
            tool_calls=[ToolCallDelta(i, cid, "function", name, args) for i, (cid, name, args) in enumerate(calls)],
        )

    both = [("c1", "bash", '{"cmd": "ls"}'), ("c2", "read", "{}")]
    assert byte_equal(got(both), rec) is True  # reasoning None == recorded ""
    assert byte_equal(got(both, content=""), rec) is False  # "" is not None
    assert byte_equal(got(both, reasoning="x"), rec) is False
    assert byte_equal(got(both[:1]), rec) is False  # a call missing
    assert byte_equal(got([*both, ("c3", "x", "")]), rec) is False  # a call more
    assert byte_equal(got([("c1", "bash", '{"cmd":"ls"}'), both[1]]), rec) is False  # raw arguments, byte for byte
    assert byte_equal(got([("c1", "Bash", '{"cmd": "ls"}'), both[1]]), rec) is False
    assert byte_equal(got([both[0], (None, "read", "{}")]), rec) is False
    assert byte_equal(got(both[::-1]), rec) is False  # order counts
    assert byte_equal(got([]), Response(content=None)) is True


async def test_an_episode_result_reprs_as_a_summary_so_a_fresh_loop_ends_without_walking_every_call(tmp_path: Path):
    # asyncio.run / uvloop.run repr the finished main task, its result included, when they
    # put the SIGINT handler back: the repr must not walk every call of the episode
    traj = _example()
    with start_replay_server(_write([traj], tmp_path / "t.jsonl")) as srv:
        res = await run_episode(traj, srv.url, mode="recorded", episode_id="ep1", stream=False)
    assert len(res.calls) == 4
    assert repr(res) == (
        "EpisodeResult(episode_id='ep1', outcome='ok', turns=4, calls=4, diff=None, "
        f"verdict={res.verdict!r}, divergences=0, server_divergences=0)"
    )
    assert repr(res.verdict).startswith("Verdict(resolved=")


_TOOLS = r"""
def run_tool(name, args):
    if name == "edit":
        src = open(args["path"]).read().replace(args["oldText"], args["newText"])
        open(args["path"], "w").write(src)
        return "Successfully replaced text in " + args["path"] + "."
    if name == "read":
        return open(args["path"]).read()
    return "all tests passed\n"
"""

# the official Anthropic SDK, streamed (/v1/messages with event: lines)
_MESSAGES_AGENT = (
    r"""
import json, os, anthropic
p = json.load(open(os.environ["BENCHMAKER_PROMPT_FILE"]))
client = anthropic.Anthropic(base_url=os.environ["OPENAI_BASE_URL"][: -len("/v1")], api_key="agent-own-key")
msgs = [{"role": "user", "content": p["first_user"]}]
"""
    + _TOOLS
    + r"""
while True:
    with client.messages.stream(model=p["model"], max_tokens=1024, messages=msgs) as s:
        final = s.get_final_message()
    msgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]})
    uses = [b for b in final.content if b.type == "tool_use"]
    if not uses:
        break
    msgs.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": b.id, "content": run_tool(b.name, b.input)} for b in uses]})
print("agent done")
"""
)

# Gemini by hand, not streamed (:generateContent, the key in the query as its clients may send it)
_GEMINI_AGENT = (
    r"""
import json, os, urllib.request
p = json.load(open(os.environ["BENCHMAKER_PROMPT_FILE"]))
url = os.environ["OPENAI_BASE_URL"][: -len("/v1")] + "/v1beta/models/" + p["model"] + ":generateContent?key=agent-own"
contents = [{"role": "user", "parts": [{"text": p["first_user"]}]}]
"""
    + _TOOLS
    + r"""
while True:
    req = urllib.request.Request(url, data=json.dumps({"contents": contents}).encode(),
                                 headers={"Content-Type": "application/json"})
    parts = json.load(urllib.request.urlopen(req))["candidates"][0]["content"]["parts"]
    contents.append({"role": "model", "parts": parts})
    calls = [x["functionCall"] for x in parts if "functionCall" in x]
    if not calls:
        break
    contents.append({"role": "user", "parts": [
        {"functionResponse": {"id": c.get("id"), "name": c["name"], "response": {"output": run_tool(c["name"], c["args"])}}}
        for c in calls]})
print("agent done")
"""
)


@pytest.mark.parametrize(("api", "agent_src"), [("messages", _MESSAGES_AGENT), ("gemini", _GEMINI_AGENT)])
async def test_command_mode_proxies_the_messages_and_gemini_apis(tmp_path: Path, api: str, agent_src: str):
    (tmp_path / "agent").mkdir(mode=0o755)
    os.chmod(tmp_path / "agent", 0o755)
    agent = tmp_path / "agent" / "agent.py"
    agent.write_text(agent_src)
    traj = _example()
    with start_replay_server(_write([traj], tmp_path / "t.jsonl"), divergence="content", token="run-token") as srv:
        res = await run_episode(
            traj,
            srv.url,
            mode="command",
            sandbox=local_sandbox_factory(),
            task=load_task(TASK_DIR),
            command=[sys.executable, str(agent)],
            api_key="run-token",
        )
        stats = srv.stats()
    ep = res.episode
    assert (ep.outcome, ep.error) == ("ok", None)
    assert (ep.n_requests, ep.n_turns, ep.misses_diverged) == (4, 4, 0)  # read, edit, bash, final
    assert (ep.resolved, ep.reverified) == (True, True)
    assert [t.turn_index for t in res.turns] == [0, 1, 2, 3]
    assert [t.n_tool_calls for t in res.turns] == [1, 1, 1, 0]
    assert stats["requests_by_api"] == {api: 4} and stats["misses"]["total"] == 0
    streamed = api == "messages"
    assert all((c.first_token_ns is not None) == streamed for c in res.calls)
    assert [c.outcome for c in res.calls] == ["ok"] * 4
