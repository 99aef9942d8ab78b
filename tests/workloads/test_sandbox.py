"""benchmaker.workloads.sandbox through the runner: local and a fake Flash coordinator on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.runner import BenchRunner
from benchmaker.workloads.sandbox import SandboxWorkload
from tests.replay.test_sandbox_flash import FakeFlash


def _samples(result) -> list[dict]:
    rows = [json.loads(line) for line in result.samples_path.read_text().splitlines()]
    return sorted(rows, key=lambda r: r["seq"])


async def _run(tmp_path: Path, wl, n: int = 3, load: str = "closed:1"):
    cfg = BenchConfig(load=load, max_requests=n, out_dir=tmp_path / "runs", kind="sandbox")
    return await BenchRunner(cfg, workload=wl).run()


async def test_local_exec_ok_and_output_chars(tmp_path: Path):
    res = await _run(tmp_path, SandboxWorkload("echo hi"))
    rows = _samples(res)
    assert [r["outcome"] for r in rows] == ["ok"] * 3
    assert [r["output_chars"] for r in rows] == [3] * 3  # "hi\n"
    assert all(set(r["meta"]) == {"exec_ms", "exit_code"} and r["meta"]["exit_code"] == 0 for r in rows)
    # E2E spans the exec phase: exec_ms <= end - sent
    assert all(r["meta"]["exec_ms"] <= (r["end_ns"] - r["sent_ns"]) / 1e6 for r in rows)


async def test_local_nonzero_exit_is_graded_wrong_not_transport_error(tmp_path: Path):
    res = await _run(tmp_path, SandboxWorkload("echo bad; exit 3"), n=2)
    rows = _samples(res)
    assert [(r["outcome"], r["grade"], r["meta"]["exit_code"]) for r in rows] == [
        ("graded_wrong", "exit_code=3", 3)
    ] * 2
    assert rows[0]["error"] == "command exited with code 3: bad\n"


async def test_local_exec_mode_shares_one_workspace(tmp_path: Path):
    # each exec appends a line to the same file: the 3rd sees 3 lines
    res = await _run(tmp_path, SandboxWorkload("echo x >> f && wc -l < f"))
    assert [r["output_chars"] for r in _samples(res)] == [2, 2, 2]  # "1\n", "2\n", "3\n"


async def test_local_lifecycle_times_each_phase_and_is_fresh_each_time(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "seed.txt").write_text("s\n")
    wl = SandboxWorkload("cat seed.txt; echo x >> f && wc -l < f", mode="lifecycle", repo=repo)
    rows = _samples(await _run(tmp_path, wl))
    assert [r["outcome"] for r in rows] == ["ok"] * 3
    # a fresh workspace each time: "s\n1\n" (4 chars) on every sample
    assert [r["output_chars"] for r in rows] == [4, 4, 4]
    for r in rows:
        m = r["meta"]
        assert set(m) == {"create_ms", "exec_ms", "delete_ms", "exit_code", "sandbox_id"}
        assert m["create_ms"] + m["exec_ms"] + m["delete_ms"] <= (r["end_ns"] - r["sent_ns"]) / 1e6
    assert len({r["meta"]["sandbox_id"] for r in rows}) == 3


async def test_local_command_timeout_is_a_timeout_sample(tmp_path: Path):
    rows = _samples(await _run(tmp_path, SandboxWorkload("sleep 5", timeout_s=0.2), n=1))
    assert (rows[0]["outcome"], rows[0]["timeout_kind"], rows[0]["meta"]["exit_code"]) == ("timeout", "total", None)
    assert rows[0]["error"] == "command timed out after 0.2 s"


async def test_flash_lifecycle_create_exec_delete(tmp_path: Path):
    async with FakeFlash() as fake:
        wl = SandboxWorkload("echo out; echo err >&2", target="flash", url=fake.url, image="img:1", mode="lifecycle")
        rows = _samples(await _run(tmp_path, wl, n=2))
        calls = list(fake.calls)
        deleted = list(fake.deleted)
    assert [r["outcome"] for r in rows] == ["ok", "ok"]
    assert [r["output_chars"] for r in rows] == [8, 8]  # "out\n" + "err\n"
    # FakeFlash names a sandbox sb-<live count + 1>: sb-1 was deleted before the 2nd create
    assert [r["meta"]["sandbox_id"] for r in rows] == ["sb-1", "sb-1"]
    assert all(r["meta"]["create_ms"] > 0 and r["meta"]["exec_ms"] > 0 and r["meta"]["delete_ms"] > 0 for r in rows)
    assert calls == [
        ("POST", "/sandboxes"),
        ("POST", "/sandboxes/sb-1/exec"),
        ("DELETE", "/sandboxes/sb-1"),
        ("POST", "/sandboxes"),
        ("POST", "/sandboxes/sb-1/exec"),
        ("DELETE", "/sandboxes/sb-1"),
    ]
    assert deleted == ["sb-1", "sb-1"]


async def test_flash_exec_on_existing_sandbox_and_nonzero_exit(tmp_path: Path):
    async with FakeFlash() as fake:
        fake.sandboxes.add("given")
        wl = SandboxWorkload("exit 7", target="flash", url=fake.url, sandbox_id="given")
        rows = _samples(await _run(tmp_path, wl, n=2))
        calls = list(fake.calls)
    assert [(r["outcome"], r["meta"], r["http_status"]) for r in rows] == [
        ("graded_wrong", {"exec_ms": rows[0]["meta"]["exec_ms"], "exit_code": 7}, 200),
        ("graded_wrong", {"exec_ms": rows[1]["meta"]["exec_ms"], "exit_code": 7}, 200),
    ]
    assert calls == [("POST", "/sandboxes/given/exec")] * 2  # nothing created or deleted


async def test_flash_exec_mode_creates_one_sandbox_before_and_deletes_after(tmp_path: Path):
    async with FakeFlash() as fake:
        wl = SandboxWorkload("true", target="flash", url=fake.url, image="img")
        rows = _samples(await _run(tmp_path, wl, n=3))
        calls = list(fake.calls)
    assert [r["outcome"] for r in rows] == ["ok"] * 3
    assert calls == [("POST", "/sandboxes")] + [("POST", "/sandboxes/sb-1/exec")] * 3 + [("DELETE", "/sandboxes/sb-1")]


async def test_flash_503_on_exec_is_http_error_and_lifecycle_still_deletes(tmp_path: Path):
    async with FakeFlash() as fake:
        # FakeFlash fails the first call of *each* route; create 1 fails, create 2 succeeds
        fake.fail_first = 1
        wl = SandboxWorkload("true", target="flash", url=fake.url, image="img", mode="lifecycle")
        rows = _samples(await _run(tmp_path, wl, n=2))
        deleted = list(fake.deleted)
    # sample 0: create -> 503; sample 1: create ok, exec -> 503, delete answers 503 too
    assert (rows[0]["outcome"], rows[0]["http_status"]) == ("http_error", 503)
    assert rows[0]["error"].startswith("create: POST /sandboxes: HTTP 503: ")
    assert set(rows[0]["meta"]) == {"create_ms"}
    assert (rows[1]["outcome"], rows[1]["http_status"]) == ("http_error", 503)
    assert rows[1]["error"].startswith("exec: POST /sandboxes/sb-1/exec: HTTP 503")
    assert set(rows[1]["meta"]) == {"create_ms", "exec_ms", "delete_ms", "sandbox_id"}
    assert deleted == []  # the delete of sb-1 was the route's first call: refused


async def test_flash_connection_refused_is_transport_error(tmp_path: Path):
    import socket

    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    wl = SandboxWorkload("true", target="flash", url=f"http://127.0.0.1:{port}", sandbox_id="x")
    rows = _samples(await _run(tmp_path, wl, n=1))
    assert rows[0]["outcome"] == "transport_error"
    assert rows[0]["error"].startswith("exec: POST /sandboxes/x/exec: ClientConnectorError")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="url: target flash needs"):
        SandboxWorkload("true", target="flash")
    with pytest.raises(ValueError, match="mode: expected exec or lifecycle"):
        SandboxWorkload("true", mode="boot")
    with pytest.raises(ValueError, match="image: target flash needs an image"):
        SandboxWorkload("true", target="flash", url="http://127.0.0.1:1", mode="lifecycle")
