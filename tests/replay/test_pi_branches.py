"""pi session trees: every assistant entry of a session file is replayed, abandoned
branches and automatic retries included, each with the request pi sent for it.

The reference here is written from pi's own rules, independently of the converter:
session-manager.ts `buildSessionContext(parentId of the assistant entry)` (the path to
the root, the latest compaction on it: summary, the kept entries from
`firstKeptEntryId`, the entries after it), with a failed (`stopReason` "error")
assistant message that pi retried left out (agent-session.ts `_prepareRetry` removes it
from the agent's messages before `continue()`; after a context overflow it compacts first
and the retry hangs below the compaction). Real pi sessions with branches under
../shared/data/real are checked against the same reference when present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.agent.model_client import ModelClient
from benchmaker.trajectories.context import previous_turn, request_messages
from benchmaker.trajectories.convert import convert_paths, detect_format, iter_trajectories, read_trajectories
from benchmaker.trajectories.converters.pi_session import COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX
from tests.replay.replay_turns import harness_bodies, point_samples, replay_turns

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "written" / "pi_v3_branches.jsonl"
REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real"

BRANCH = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n{}</summary>"


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p.get("type") == "text")


def _as_message(entry: dict) -> tuple[str, str | None] | None:
    """(role, content) pi sends for an entry on the path (user/tool/assistant text)."""
    if entry["type"] == "branch_summary" and entry.get("summary"):
        return ("user", BRANCH.format(entry["summary"]))
    if entry["type"] != "message":
        return None
    m = entry["message"]
    if m["role"] == "user":
        return ("user", _text(m["content"]))
    if m["role"] == "toolResult":
        return ("tool", _text(m["content"]))
    if m["role"] == "assistant":
        texts = [p["text"] for p in m["content"] if p.get("type") == "text"]
        return ("assistant", "\n".join(texts) if texts else None)
    raise AssertionError(f"role {m['role']} not in the reference")


def reference_requests(path: Path) -> list[list[tuple[str, str | None]]]:
    """The request of every assistant entry in file order, by pi's rules (module doc)."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    entries = [e for e in lines if e["type"] != "session"]
    by_id = {e["id"]: e for e in entries}
    retried = set()  # failed calls pi retried: an assistant below them (through compactions)
    for e in entries:
        if e["type"] == "message" and e["message"]["role"] == "assistant":
            up = by_id.get(e["parentId"])
            while up is not None and up["type"] == "compaction":
                up = by_id.get(up["parentId"])
            if up is not None and up["type"] == "message" and up["message"].get("stopReason") == "error":
                retried.add(up["id"])
    out = []
    for e in entries:
        if e["type"] != "message" or e["message"]["role"] != "assistant":
            continue
        chain, cur = [], e["parentId"]
        while cur is not None:
            chain.append(by_id[cur])
            cur = by_id[cur]["parentId"]
        chain.reverse()
        comps = [i for i, x in enumerate(chain) if x["type"] == "compaction"]
        msgs: list[tuple[str, str | None]] = []
        picked = chain
        if comps:
            at = comps[-1]
            comp = chain[at]
            msgs.append(("user", COMPACTION_SUMMARY_PREFIX + comp["summary"] + COMPACTION_SUMMARY_SUFFIX))
            first = next((i for i in range(at) if chain[i]["id"] == comp["firstKeptEntryId"]), at)
            picked = chain[first:at] + chain[at + 1 :]
        for x in picked:
            if x["id"] in retried:
                continue
            m = _as_message(x)
            if m is not None:
                msgs.append(m)
        out.append(msgs)
    return out


def _roles_contents(messages: list[dict]) -> list[tuple[str, str | None]]:
    return [(m["role"], m["content"]) for m in messages]


def test_every_assistant_entry_is_a_turn_with_the_request_pi_sent():
    t = next(iter_trajectories(FIXTURE))
    assert detect_format(FIXTURE) == "pi-session"
    # file order: e02 e04 | e06 e08(error) e09(retry) abandoned by /tree | e12 e15 e17
    assert [x.response.finish_reason for x in t.turns] == [
        "tool_calls",
        "stop",
        "tool_calls",
        "error",
        "stop",
        "tool_calls",
        "stop",
        "stop",
    ]
    assert [x.response.content for x in t.turns][4] == "Done: it prints bonjour."
    assert [None if x.context_edit is None else x.context_edit.kind for x in t.turns] == [
        None,
        None,
        None,
        None,
        "branch",
        "branch",
        "compaction",
        None,
    ]
    assert t.turns[6].context_edit.tokens_before == 3000
    assert "off_branch_entry" not in t.skipped
    ref = reference_requests(FIXTURE)
    got = [_roles_contents(request_messages(t, k)) for k in range(len(t.turns))]
    assert got == ref
    # hand-checked against the tree: the retry (turn 4) resends the failed call's request
    assert got[4] == got[3] and ("assistant", "Wrote hello.py.") in got[4]
    # after /tree back to e04 with a summary: e01..e04, the branch summary, the new prompt
    french_summary = "The user asked for French output; hello.py was changed to print bonjour."
    assert got[5] == [
        ("user", "task_id: br-1\nWrite hello.py that prints a greeting"),
        ("assistant", None),
        ("tool", "Wrote 15 bytes to hello.py"),
        ("assistant", "Wrote hello.py."),
        ("user", BRANCH.format(french_summary)),
        ("user", "Make it print in Spanish instead"),
    ]
    # after the compaction: summary, the kept e11..e13, then what followed
    assert got[7][1:] == [
        ("user", "Make it print in Spanish instead"),
        ("assistant", None),
        ("tool", "Replaced 1 occurrence"),
        ("assistant", "Done: it prints hola."),
        ("user", "thanks"),
    ]
    for g in got[5:]:  # the abandoned branch is not resent
        assert ("user", "Now make it print in French") not in g and ("assistant", "Done: it prints bonjour.") not in g


def test_branches_replay_turn_by_turn_with_no_miss(tmp_path):
    out = tmp_path / "trajectories.jsonl"
    convert_paths([FIXTURE], out)
    t = next(iter_trajectories(FIXTURE))
    ref = reference_requests(FIXTURE)
    run = replay_turns(out, t)
    for k, messages in enumerate(run.requests):  # the episode's own responses so far, as received
        assert _roles_contents(messages) == ref[k], k
        got = run.responses[k]["choices"][0]
        assert got["message"]["content"] == t.turns[k].response.content
        assert got["finish_reason"] == t.turns[k].response.finish_reason
    assert run.stats["misses"]["total"] == 0 and run.stats["served"] == len(t.turns)


def test_single_path_v3_session_gets_no_edit(tmp_path):
    # the header and the first four entries of the fixture are one path
    src = tmp_path / "s.jsonl"
    src.write_text("\n".join(FIXTURE.read_text().splitlines()[:5]) + "\n")
    t = next(iter_trajectories(src))
    assert [x.context_edit for x in t.turns] == [None, None]


def _real_pi_trees() -> list[Path]:
    if not REAL.is_dir():
        return []
    found = []
    for p in sorted(REAL.glob("*.jsonl")):
        with p.open("rb") as f:
            head = f.readline()
        try:
            header = json.loads(head)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if header.get("type") != "session" or not isinstance(header.get("version"), int) or header["version"] < 2:
            continue
        parents = [json.loads(x).get("parentId") for x in p.read_text().splitlines()[1:] if x.strip()]
        if len(parents) != len(set(parents)):  # some entry has two children: a branch
            found.append(p)
    return found


@pytest.mark.parametrize("path", _real_pi_trees() or [None], ids=lambda p: p.name if p else "none")
def test_real_pi_sessions_with_branches(path):
    if path is None:
        pytest.skip(f"no pi v2/v3 session with branches under {REAL}")
    t = next(iter_trajectories(path))
    assert [_roles_contents(request_messages(t, k)) for k in range(len(t.turns))] == reference_requests(path)


async def test_branches_replayed_by_a_sweep_point_send_what_pi_sent(tmp_path: Path) -> None:
    out = tmp_path / "trajectories.jsonl"
    convert_paths([FIXTURE], out)
    (traj,) = read_trajectories(out)
    row, stats, samples = await point_samples(out, traj, tmp_path / "run")
    assert stats["misses"]["total"] == 0 and stats["served"] == 8  # 1 episode x 8 turns
    assert row["misses_total"] == 0 and row["n_requests"] == 8
    # the failed call pi retried is served as recorded, counted apart
    assert [s["outcome"] for s in samples] == ["ok"] * 3 + ["recorded_error"] + ["ok"] * 4
    client = ModelClient("http://unused")
    expected = [len(client.encode(client.body(request_messages(traj, k), model=traj.model))) for k in range(8)]
    sent = [s["bytes_sent"] for s in samples]
    assert sent == expected
    # the retry resends the failed call's body; the new branch drops the abandoned one
    assert sent[4] == sent[3] and sent[5] < sent[4]


def _tool_branch_session(path: Path) -> Path:
    """A v3 tree whose abandoned branch ends in a tool result: U, A0 (call c1), R(c1),
    A1 (call c2), R(c2); /tree back to R(c1), a new prompt, A2."""

    def msg(i: str, parent: str | None, m: dict) -> dict:
        return {"type": "message", "id": i, "parentId": parent, "timestamp": "2026-02-03T10:00:00.000Z", "message": m}

    def call(cid: str) -> dict:
        return {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": cid, "name": "bash", "arguments": {"command": "ls"}}],
            "stopReason": "toolUse",
            "model": "m1",
            "usage": {"input": 10, "output": 2},
            "timestamp": 1770112800000,
        }

    def result(cid: str, text: str) -> dict:
        return {
            "role": "toolResult",
            "toolCallId": cid,
            "toolName": "bash",
            "content": [{"type": "text", "text": text}],
            "isError": False,
            "timestamp": 1770112800000,
        }

    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-02-03T10:00:00.000Z", "cwd": "/w"},
        msg("u1", None, {"role": "user", "content": "task_id: br-2\nlist files", "timestamp": 1770112800000}),
        msg("a0", "u1", call("c1")),
        msg("r1", "a0", result("c1", "a.py")),
        msg("a1", "r1", call("c2")),
        msg("r2", "a1", result("c2", "a.py")),
        msg("u2", "r1", {"role": "user", "content": "try another way", "timestamp": 1770112800000}),
        msg(
            "a2",
            "u2",
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Done."}],
                "stopReason": "stop",
                "model": "m1",
                "usage": {"input": 10, "output": 2},
                "timestamp": 1770112800000,
            },
        ),
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.mark.parametrize("policy", ["status", "content"])
def test_divergence_check_follows_the_branch(tmp_path: Path, policy: str) -> None:
    # after /tree the request goes on from turn 0's tool result (c1), not from turn 1's
    # (c2): checked against turn 0's observations (against turn 1's, c1 is unknown)
    src = _tool_branch_session(tmp_path / "s.jsonl")
    out = tmp_path / "trajectories.jsonl"
    convert_paths([src], out)
    (t,) = iter_trajectories(src)
    assert [previous_turn(t, k) for k in range(len(t.turns))] == [None, 0, 0]
    run = replay_turns(out, t, divergence=policy)
    assert run.stats["divergences"]["total"] == 0 and run.stats["misses"]["total"] == 0
    assert all("x-replay-divergence" not in h for h in run.headers)
    # the written fixture too: the retry goes on from turn 2, the new branch from turn 1
    (b,) = iter_trajectories(FIXTURE)
    assert [previous_turn(b, k) for k in range(len(b.turns))] == [None, 0, 1, 2, 2, 1, 5, 6]


@pytest.mark.parametrize("mode", ["recorded", "execute"])
async def test_harness_sends_each_branch_as_pi_did(tmp_path: Path, mode: str) -> None:
    # the engine harness: requests rebuilt at each branch/retry/compaction edit, grown
    # between them; in execute mode the pi tools run in an empty workspace (the edits
    # fail there: the tool results differ, the context rule does not)
    out = tmp_path / "trajectories.jsonl"
    convert_paths([FIXTURE], out)
    (traj,) = read_trajectories(out)
    res, bodies = await harness_bodies(out, traj, mode=mode)
    assert res.episode.n_turns == 8 and res.episode.misses_unknown_key + res.episode.misses_beyond_turns == 0
    ref = reference_requests(FIXTURE)
    if mode == "recorded":
        assert [_roles_contents(b) for b in bodies] == ref
    else:  # same shape turn by turn: roles, and every non-tool message as pi sent it
        assert [[r for r, _ in _roles_contents(b)] for b in bodies] == [[r for r, _ in x] for x in ref]
        assert [[c for r, c in _roles_contents(b) if r != "tool"] for b in bodies] == [
            [c for r, c in x if r != "tool"] for x in ref
        ]


def test_forked_file_counts_the_turns_copied_from_its_parent(tmp_path: Path) -> None:
    # pi's createBranchedSession / forkFrom: a new header naming the parent session, then
    # the parent's entries as they were (ids, timestamps), then what the fork added
    lines = FIXTURE.read_text().splitlines()
    header = dict(
        json.loads(lines[0]),
        id="f0rk",
        timestamp="2026-02-03T10:00:07.000Z",
        parentSession="/home/u/.pi/agent/sessions/--work-demo--/2026-02-03_a1b2.jsonl",
    )
    fork = [json.dumps(header), *lines[1:5]]  # e01..e04: copied
    fork.append(
        json.dumps(
            {
                "type": "message",
                "id": "f05",
                "parentId": "e04",
                "timestamp": "2026-02-03T10:00:08.000Z",
                "message": {"role": "user", "content": "And in German?", "timestamp": 1770112808000},
            }
        )
    )
    fork.append(
        json.dumps(
            {
                "type": "message",
                "id": "f06",
                "parentId": "f05",
                "timestamp": "2026-02-03T10:00:09.000Z",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "Hallo."}],
                    "stopReason": "stop",
                    "usage": {"input": 40, "output": 3},
                    "model": "acme-coder-1",
                    "timestamp": 1770112808500,
                },
            }
        )
    )
    src = tmp_path / "fork.jsonl"
    src.write_text("\n".join(fork) + "\n")
    (t,) = iter_trajectories(src)
    assert [x.response.content for x in t.turns] == [None, "Wrote hello.py.", "Hallo."]
    assert t.skipped["turn_copied_from_parent_session"] == 2
    assert all(x.context_edit is None for x in t.turns)


def test_overflow_compaction_in_a_session_retries_without_the_failed_call(tmp_path: Path) -> None:
    # e15 overflows; pi writes the compaction below it and retries below the compaction
    lines = FIXTURE.read_text().splitlines()
    entries = [json.loads(x) for x in lines]
    by_id = {e.get("id"): e for e in entries}
    failed = {
        "type": "message",
        "id": "e14x",
        "parentId": "e13",
        "timestamp": "2026-02-03T10:00:29.000Z",
        "message": {
            "role": "assistant",
            "content": [],
            "stopReason": "error",
            "model": "acme-coder-1",
            "usage": {"input": 0, "output": 0},
            "timestamp": 1770112828000,
            "errorMessage": "prompt is too long: 210000 tokens > 200000 maximum",
        },
    }
    by_id["e14"]["parentId"] = "e14x"
    at = entries.index(by_id["e14"])
    entries.insert(at, failed)
    src = tmp_path / "overflow.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in entries))
    (t,) = iter_trajectories(src)
    assert [x.response.finish_reason for x in t.turns][5:] == ["tool_calls", "error", "stop", "stop"]
    ref = reference_requests(src)  # pi's rule, the retried failed call left out
    assert [_roles_contents(request_messages(t, k)) for k in range(len(t.turns))] == ref
    summary = COMPACTION_SUMMARY_PREFIX + json.loads(lines[14])["summary"] + COMPACTION_SUMMARY_SUFFIX
    assert ref[7] == [
        ("user", summary),
        ("user", "Make it print in Spanish instead"),
        ("assistant", None),
        ("tool", "Replaced 1 occurrence"),
    ]  # e15: the kept e11..e13, not the failed e14x
