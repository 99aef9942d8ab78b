"""benchmaker.agent.sandbox.flash against a fake Flash coordinator on 127.0.0.1 (aiohttp)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import pytest
from aiohttp import web

from benchmaker.agent.sandbox import FlashSandbox, Sandbox, SandboxError


class FakeFlash:
    """Implements POST /sandboxes, POST /sandboxes/{id}/exec, DELETE /sandboxes/{id};
    runs scripts with local bash. The first `fail_first` calls of each route answer
    `fail_status`."""

    def __init__(self, fail_first: int = 0, fail_status: int = 503, fail_code: str | None = None):
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.fail_code = fail_code
        self.calls: list[tuple[str, str]] = []
        self.failed: dict[str, int] = {}
        self.sandboxes: set[str] = set()
        self.deleted: list[str] = []
        self.create_bodies: list[dict] = []

    def _maybe_fail(self, route: str) -> web.Response | None:
        n = self.failed.get(route, 0)
        if n < self.fail_first:
            self.failed[route] = n + 1
            body = {"error": "busy"} if self.fail_code is None else {"error": "x", "code": self.fail_code}
            return web.json_response(body, status=self.fail_status)
        return None

    async def create(self, request: web.Request) -> web.Response:
        self.calls.append(("POST", "/sandboxes"))
        if (r := self._maybe_fail("create")) is not None:
            return r
        self.create_bodies.append(await request.json())
        sid = f"sb-{len(self.sandboxes) + 1}"
        self.sandboxes.add(sid)
        return web.json_response({"id": sid, "status": "running"})

    async def exec(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        self.calls.append(("POST", f"/sandboxes/{sid}/exec"))
        if (r := self._maybe_fail("exec")) is not None:
            return r
        if sid not in self.sandboxes:
            return web.json_response({"error": "not found"}, status=404)
        body = await request.json()
        try:
            p = await asyncio.to_thread(
                subprocess.run,
                ["bash", "-c", body["script"]],
                capture_output=True,
                timeout=body.get("timeout_ms", 60000) / 1000,
            )
        except subprocess.TimeoutExpired:
            return web.json_response({"stdout": "", "stderr": "", "exit_code": -1, "error": "command timeout"})
        return web.json_response({"stdout": p.stdout.decode(), "stderr": p.stderr.decode(), "exit_code": p.returncode})

    async def delete(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        self.calls.append(("DELETE", f"/sandboxes/{sid}"))
        if (r := self._maybe_fail("delete")) is not None:
            return r
        self.sandboxes.discard(sid)
        self.deleted.append(sid)
        return web.Response(status=204)

    async def __aenter__(self) -> FakeFlash:
        app = web.Application()
        app.router.add_post("/sandboxes", self.create)
        app.router.add_post("/sandboxes/{sid}/exec", self.exec)
        app.router.add_delete("/sandboxes/{sid}", self.delete)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        await web.SockSite(self.runner, sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    w = tmp_path / "testbed"
    w.mkdir()
    (w / "a.py").write_text("x = 1\n")
    return w


async def test_create_exec_files_diff_delete(workdir: Path):
    async with FakeFlash() as fake:
        sb = await FlashSandbox.create(fake.url, image="alpine:latest", workdir=str(workdir), backoff_s=0.01)
        assert isinstance(sb, Sandbox)
        res = await sb.exec("echo out; echo err >&2; exit 2")
        assert (res.exit_code, res.output, res.timed_out) == (2, "out\nerr\n", False)
        assert await sb.read_file("a.py") == b"x = 1\n"
        await sb.write_file("sub/b.txt", b"caf\xc3\xa9 'q'\n")
        assert (workdir / "sub" / "b.txt").read_bytes() == b"caf\xc3\xa9 'q'\n"
        await sb.write_file("a.py", b"x = 2\n")
        diff = await sb.diff()
        await sb.close()
        assert fake.deleted == ["sb-1"]
        assert fake.create_bodies[0]["image"] == "alpine:latest"
    assert "-x = 1\n+x = 2\n" in diff and "+++ b/sub/b.txt" in diff


async def test_retries_502_503_with_backoff_then_succeeds(workdir: Path):
    async with FakeFlash(fail_first=2, fail_status=502) as fake:
        sb = await FlashSandbox.create(fake.url, image="img", workdir=str(workdir), backoff_s=0.01)
        res = await sb.exec("echo hi")
        await sb.close()
    assert res.output == "hi\n"
    # 2 failures each for create, exec (the baseline exec) and delete
    assert sb.n_retries == 6
    assert fake.calls[:3] == [("POST", "/sandboxes")] * 3


async def test_gives_up_after_retries_and_names_the_status(workdir: Path):
    async with FakeFlash(fail_first=10, fail_status=503) as fake:
        with pytest.raises(SandboxError, match="HTTP 503"):
            await FlashSandbox.create(fake.url, image="img", workdir=str(workdir), retries=2, backoff_s=0.01)
        assert fake.calls == [("POST", "/sandboxes")] * 3  # first try + 2 retries


async def test_execution_uncertain_is_not_retried(workdir: Path):
    async with FakeFlash(fail_first=1, fail_status=503, fail_code="execution_uncertain") as fake:
        with pytest.raises(SandboxError, match="execution_uncertain"):
            await FlashSandbox.create(fake.url, image="img", workdir=str(workdir), backoff_s=0.01)
        assert fake.calls == [("POST", "/sandboxes")]


async def test_failed_baseline_deletes_the_sandbox(tmp_path: Path):
    async with FakeFlash() as fake:
        with pytest.raises(SandboxError, match="git baseline failed"):
            await FlashSandbox.create(fake.url, image="img", workdir=str(tmp_path / "missing"), backoff_s=0.01)
        assert fake.deleted == ["sb-1"]
