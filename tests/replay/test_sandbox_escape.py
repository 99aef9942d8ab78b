"""Execute and command mode confined: a recording whose tool commands try to read a private key by
absolute path, write outside the task, open a TCP connection to a listener of this
test and escalate is replayed; every attempt fails as the tool's failure (non-zero
exit, a divergence from the recorded success in the episode) and nothing escapes.
The same recording replayed with the sandbox unconfined does escape (so the checks can
fail)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmaker.agent.harness import local_sandbox_factory, run_episode
from benchmaker.agent.verifier import load_task
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.convert import iter_trajectories

ROOT = Path(__file__).resolve().parents[2]
DECOY_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- decoy-7f3a\n"


class _Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _pi_session(commands: list[str]) -> str:
    """A pi session log: one bash tool call per command, each recorded as succeeding
    with output "ok", then a final answer."""
    lines = [
        {
            "type": "session",
            "id": "5e55a0b1-0000-4000-8000-00000000e5c4",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/work/escape",
            "provider": "openai",
            "modelId": "gpt-4o-mini",
            "thinkingLevel": "off",
        },
        {
            "type": "message",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {
                "role": "user",
                "content": [{"type": "text", "text": "task_id: escape\nTry to get out."}],
                "timestamp": 1767225600000,
            },
        },
    ]
    usage = {
        "input": 10,
        "output": 5,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 15,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    t = 1767225600000
    for i, cmd in enumerate(commands):
        t += 10
        lines.append(
            {
                "type": "message",
                "timestamp": "2026-01-01T00:00:01.000Z",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "toolCall", "id": f"call_{i}", "name": "bash", "arguments": {"command": cmd}}],
                    "api": "openai-completions",
                    "provider": "openai",
                    "model": "gpt-4o-mini",
                    "usage": usage,
                    "stopReason": "toolUse",
                    "timestamp": t,
                },
            }
        )
        lines.append(
            {
                "type": "message",
                "timestamp": "2026-01-01T00:00:01.000Z",
                "message": {
                    "role": "toolResult",
                    "toolCallId": f"call_{i}",
                    "toolName": "bash",
                    "content": [{"type": "text", "text": "ok\n"}],
                    "isError": False,
                    "timestamp": t + 5,
                },
            }
        )
    lines.append(
        {
            "type": "message",
            "timestamp": "2026-01-01T00:00:02.000Z",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "done"}],
                "api": "openai-completions",
                "provider": "openai",
                "model": "gpt-4o-mini",
                "usage": usage,
                "stopReason": "stop",
                "timestamp": t + 20,
            },
        }
    )
    return "".join(json.dumps(x) + "\n" for x in lines)


@pytest.fixture
def scene(tmp_path: Path):
    """The decoys, markers, listener and task of one replay; yields a dict."""
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    caller_home = tmp_path / "caller-home"  # stands for the caller's ~ (its .ssh 0700, key 0600)
    (caller_home / ".ssh").mkdir(parents=True)
    os.chmod(caller_home / ".ssh", 0o700)
    key = caller_home / ".ssh" / "id_ed25519"
    key.write_text(DECOY_KEY)
    os.chmod(key, 0o600)
    task = tmp_path / "task"
    task.mkdir()
    (task / "a.txt").write_text("a\n")
    outside = tmp_path / "outside-marker"
    (task / "task.json").write_text(
        json.dumps(
            {"task_id": "escape", "timeout_s": 60, "test_command": f"echo verifier > {outside}.verifier && cat {key}"}
        )
    )
    listener = _Listener()
    s = {
        "tag": tag,
        "key": key,
        "caller_home": caller_home,
        "task": task,
        "outside": outside,
        "tmp_marker": Path(f"/tmp/escape-marker-{tag}"),
        "listener": listener,
        "tmp_path": tmp_path,
    }
    try:
        yield s
    finally:
        listener.close()
        s["tmp_marker"].unlink(missing_ok=True)


def _commands(s: dict, *, host_writes: bool) -> list[str]:
    """The escape attempts (each one command). `host_writes` adds the attempts whose
    success would write to the real host outside tmp_path (the repository, /etc, the
    caller's real HOME): only for the confined replay."""
    port = s["listener"].port
    cmds = [
        f"cat {s['key']}",
        f"echo escaped > {s['outside']}",
        f"echo escaped > {s['caller_home']}/x",
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)\"",
        'python3 -c "import os; os.setuid(0)"',
    ]
    if host_writes:
        cmds += [
            f"echo escaped > {ROOT}/escape-marker-{s['tag']}",
            f"echo escaped > /etc/escape-marker-{s['tag']}",
            "echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd",
            f"echo escaped > {Path.home()}/escape-marker-{s['tag']}",
            "su -c id root",
            "sudo -n id",
            f"cp /bin/sh ./sh && chmod u+s ./sh && ./sh -p -c 'test $(id -u) = 0 || exit 9; echo {s['tag']} >> /etc/passwd'",
        ]
    return cmds


async def _replay(s: dict, commands: list[str], *, confined: bool):
    log = s["tmp_path"] / f"escape-{confined}.pi.jsonl"
    log.write_text(_pi_session(commands))
    (traj,) = list(iter_trajectories(log))
    traj_file = s["tmp_path"] / f"escape-{confined}.trajectories.jsonl"
    traj_file.write_text(traj.model_dump_json() + "\n")
    with start_replay_server(traj_file) as srv:
        return await run_episode(
            traj,
            srv.url,
            mode="execute",
            sandbox=local_sandbox_factory(confined=confined),
            task=load_task(s["task"]),
            run_id="escape",
        )


async def test_every_escape_is_a_failed_tool_call_and_nothing_escapes(scene: dict):
    s = scene
    commands = _commands(s, host_writes=True)
    passwd = Path("/etc/passwd").read_bytes()
    # a private /tmp: a write there succeeds inside the sandbox and stays there
    res = await _replay(s, [*commands, f"echo inside > {s['tmp_marker']} && cat {s['tmp_marker']}"], confined=True)
    ep = res.episode
    assert (ep.outcome, ep.error, ep.n_turns) == ("ok", None, len(commands) + 2)
    # every attempt failed: its observation is an error where the recording had success
    expected = [f"turn {i} call call_{i}: content, is_error True != recorded False" for i in range(len(commands))]
    assert res.divergence_details == [*expected, f"turn {len(commands)} call call_{len(commands)}: content"]
    assert ep.divergences == len(commands) + 1
    # the verifier ran confined too: its write outside failed, so not resolved
    assert res.verdict is not None and (res.verdict.resolved, res.verdict.reverified) == (False, True)
    assert res.verdict.exit_code != 0 and DECOY_KEY.strip() not in (res.verdict.output_tail or "")
    # nothing escaped
    assert s["listener"].accepted == 0
    assert not s["outside"].exists() and not Path(f"{s['outside']}.verifier").exists()
    assert not (s["caller_home"] / "x").exists()
    assert not s["tmp_marker"].exists()
    assert not (ROOT / f"escape-marker-{s['tag']}").exists()
    assert not Path(f"/etc/escape-marker-{s['tag']}").exists()
    assert not (Path.home() / f"escape-marker-{s['tag']}").exists()
    assert Path("/etc/passwd").read_bytes() == passwd
    assert ep.tool_time_ns > 0 and all(t.tool_time_ns > 0 for t in res.turns[:-1])


async def test_the_same_escapes_succeed_unconfined(scene: dict):
    """Control: with --sandbox none the first attempts do escape (so the confined test
    above checks what it claims). Only the writes into tmp_path are replayed here."""
    s = scene
    commands = _commands(s, host_writes=False)
    res = await _replay(s, commands, confined=False)
    # read, write outside, write to the caller's home and connect all succeeded (their
    # output differs from the recorded "ok"); setuid(0) succeeds only for root
    setuid = "content" if os.geteuid() == 0 else "content, is_error True != recorded False"
    assert res.divergence_details == [f"turn {i} call call_{i}: content" for i in range(4)] + [
        f"turn 4 call call_4: {setuid}"
    ]
    assert s["outside"].read_text() == "escaped\n"
    assert (s["caller_home"] / "x").read_text() == "escaped\n"
    assert Path(f"{s['outside']}.verifier").read_text() == "verifier\n"
    deadline = time.monotonic() + 5.0
    while s["listener"].accepted == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert s["listener"].accepted == 1
    assert res.verdict is not None and res.verdict.resolved is (os.geteuid() == 0)  # root reads the 0600 key


_ESCAPING_AGENT = r"""
import os, socket, sys
escaped = []
tries = {
    "read key": lambda: open(sys.argv[1]).read(),
    "write outside": lambda: open(sys.argv[2], "w").write("escaped"),
    "connect": lambda: socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=5),
    "setuid": lambda: os.setuid(0),
}
for name, attempt in tries.items():
    try:
        attempt()
        escaped.append(name)
    except OSError:
        pass
if escaped:
    print("escaped:", ", ".join(escaped))
    sys.exit(42)
"""


async def test_a_command_mode_agent_reaches_only_the_proxy(scene: dict, tmp_path: Path):
    """Command mode confined: the agent talks to the model through its base URL (the
    episode resolves) while its key read, write outside, connection to the test's
    listener and setuid all fail."""
    from tests.replay.test_harness import _AGENT

    s = scene
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir(mode=0o755)
    os.chmod(agent_dir, 0o755)  # the confined agent's user must read its program
    (agent_dir / "agent.py").write_text(_ESCAPING_AGENT + _AGENT)
    (traj,) = list(iter_trajectories(ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"))
    traj_file = tmp_path / "t.jsonl"
    traj_file.write_text(traj.model_dump_json() + "\n")
    with start_replay_server(traj_file, divergence="content") as srv:
        res = await run_episode(
            traj,
            srv.url,
            mode="command",
            sandbox=local_sandbox_factory(),
            task=load_task(ROOT / "examples" / "tiny-task"),
            command=[
                sys.executable,
                str(agent_dir / "agent.py"),
                str(s["key"]),
                str(s["outside"]),
                str(s["listener"].port),
            ],
        )
    ep = res.episode
    assert (ep.outcome, ep.error) == ("ok", None)  # exit 0: no attempt escaped; the proxy answered
    assert (ep.n_requests, ep.resolved, ep.reverified) == (4, True, True)
    assert s["listener"].accepted == 0 and not s["outside"].exists()


async def test_a_fifo_made_by_a_command_is_a_failed_read_not_a_hang(tmp_path: Path):
    """The file tools run in the harness's process: a FIFO a command made in the
    workspace would block their open() forever; it is refused as a tool failure."""
    from benchmaker.agent.sandbox import LocalSandbox
    from benchmaker.agent.tools import run_pi_tool

    sb = await LocalSandbox.create(None)
    try:
        assert (await sb.exec("mkfifo pipe")).exit_code == 0
        read = await asyncio.wait_for(run_pi_tool(sb, "read", {"path": "pipe"}), 30.0)
        write = await asyncio.wait_for(run_pi_tool(sb, "write", {"path": "pipe", "content": "x"}), 30.0)
    finally:
        await sb.close()
    assert (read.is_error, read.content) == (
        True,
        "pipe: not a regular file (refused like a path outside the workspace)",
    )
    assert write.is_error is True
