"""Sandbox workloads: command latency in a sandbox, and the create -> exec -> delete
lifecycle with each phase timed.

    SandboxWorkload("echo hi")                                   # local, exec mode
    SandboxWorkload("echo hi", mode="lifecycle")                 # local temp workspace per sample
    SandboxWorkload("echo hi", target="flash", url="http://127.0.0.1:8080",
                    sandbox_id="sb-1")                           # /exec on an existing sandbox
    SandboxWorkload("echo hi", target="flash", url=URL, image="alpine:3", mode="lifecycle")

A CallableWorkload (benchmaker.engine.types): the runner calls `execute` per sample and times
it as E2E (`end_ns - sent_ns`). Per-phase times go to `sample.meta` in ms:

    exec mode       {"exec_ms", "exit_code"}
    lifecycle mode  {"create_ms", "exec_ms", "delete_ms", "exit_code", "sandbox_id"}

Each phase is `time.perf_counter_ns()` around its call (flash: one HTTP request with its
body read; local: `LocalSandbox.create` / `.exec` / `.close`). A phase that did not run
is absent. A lifecycle whose exec failed still deletes (timed) what it created.

Targets:
- `local` (default, embedded): `benchmaker.agent.sandbox.local.LocalSandbox`, a temp workspace and
  `bash -c COMMAND` subprocesses; exec mode shares one workspace made in `start()`,
  lifecycle mode makes one per sample (copy of `repo` when given, git baseline).
- `flash`: the Flash Sandbox coordinator HTTP API (wire format as in
  benchmaker.agent.sandbox.flash: `POST /sandboxes` -> {"id"}, `POST /sandboxes/{id}/exec`
  {"script", "timeout_ms"} -> {"stdout", "stderr", "exit_code", ["error"]},
  `DELETE /sandboxes/{id}`) over one aiohttp session, without retries (a benchmark
  reports a 503, it does not hide it). The script is the command as given. Exec mode
  uses `sandbox_id`, or creates one sandbox in `start()` and deletes it in `aclose()`.

Outcomes: exit code 0 -> ok; a non-zero exit code -> `graded_wrong` (the sandbox worked,
the command failed; `grade` "exit_code=N"); the command's own timeout -> `timeout`
with `timeout_kind` "total" and error "command timed out ..."; a status >= 400 from the
coordinator -> `http_error` with `error` naming the phase and body; connection failures
-> `transport_error`; a local sandbox failure (SandboxError) -> `transport_error`.
`output_chars` is the length of the command's output (stdout + stderr).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson

from benchmaker.engine.records import Outcome, Sample, TimeoutKind

__all__ = ["SandboxWorkload"]

_ERROR_BODY_MAX = 2000


class _PhaseError(Exception):
    """A coordinator call failed; `outcome` is the Sample outcome it maps to."""

    def __init__(self, outcome: str, message: str, status: int | None = None):
        super().__init__(message)
        self.outcome = outcome
        self.status = status


class _Flash:
    """Minimal Flash coordinator client on one aiohttp session (no retries)."""

    def __init__(self, url: str, api_key: str | None):
        self.base = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = aiohttp.ClientTimeout(total=600.0)  # s, a coordinator call's deadline
        self.session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=self.timeout, headers=self.headers
            )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def call(self, phase: str, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """One request; returns (status, parsed JSON or None). Raises _PhaseError."""
        self.open()
        assert self.session is not None
        try:
            async with self.session.request(method, self.base + path, json=body) as resp:
                data = await resp.read()
                status = resp.status
        except TimeoutError as exc:
            raise _PhaseError(Outcome.TIMEOUT.value, f"{phase}: {method} {path}: HTTP timeout") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _PhaseError(
                Outcome.TRANSPORT_ERROR.value, f"{phase}: {method} {path}: {type(exc).__name__}: {exc}"
            ) from exc
        if status >= 400:
            text = data[:_ERROR_BODY_MAX].decode("utf-8", "replace")
            raise _PhaseError(Outcome.HTTP_ERROR.value, f"{phase}: {method} {path}: HTTP {status}: {text}", status)
        if not data:
            return status, None
        try:
            return status, orjson.loads(data)
        except ValueError as exc:
            raise _PhaseError(
                Outcome.PROTOCOL_ERROR.value,
                f"{phase}: {method} {path}: answer is not JSON (got {data[:200]!r})",
                status,
            ) from exc


class SandboxWorkload:
    """Runs `command` in a sandbox per sample (module docstring); a CallableWorkload.

    `target` "local" | "flash"; `mode` "exec" | "lifecycle". Flash needs `url`; exec
    mode on flash uses `sandbox_id` or creates one sandbox (from `image`) in `start()`;
    lifecycle on flash needs `image`. `timeout_s` is the command's deadline (s), sent
    as `timeout_ms`. `repo` (local) is copied into each lifecycle workspace. `confined`
    (local): commands run under bubblewrap (benchmaker.agent.sandbox.confine); False runs
    them unconfined. Raises ValueError on an unknown target/mode or a missing url/image.
    """

    name = "sandbox"

    def __init__(
        self,
        command: str,
        *,
        target: Literal["local", "flash"] = "local",
        mode: Literal["exec", "lifecycle"] = "exec",
        url: str | None = None,
        sandbox_id: str | None = None,
        image: str | None = None,
        sandbox_type: str = "",
        template: str | None = None,
        memory_mb: int = 512,
        cpu_cores: float = 1.0,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        repo: Path | None = None,
        confined: bool = True,
    ) -> None:
        url, sandbox_id, image = url or None, sandbox_id or None, image or None  # "" (unset env) = absent
        if target not in ("local", "flash"):
            raise ValueError(f"target: expected local or flash (got {target!r})")
        if mode not in ("exec", "lifecycle"):
            raise ValueError(f"mode: expected exec or lifecycle (got {mode!r})")
        if not command:
            raise ValueError("command: expected a shell command (got '')")
        if target == "flash":
            if not url:
                raise ValueError("url: target flash needs the coordinator URL")
            if not image and (mode == "lifecycle" or sandbox_id is None):
                raise ValueError(
                    "image: target flash needs an image to create sandboxes from (or give sandbox_id for exec mode)"
                )
        self.command = command
        self.target = target
        self.mode = mode
        self.url = url
        self.sandbox_id = sandbox_id
        self.image = image
        self.sandbox_type = sandbox_type
        self.template = template
        self.memory_mb = memory_mb
        self.cpu_cores = cpu_cores
        self.timeout_s = timeout_s
        self.repo = repo
        self.confined = confined
        self._flash = _Flash(url, api_key) if target == "flash" and url else None  # url checked above
        self._own_flash_id: str | None = None
        self._local: Any = None

    def describe(self) -> dict[str, Any]:
        """The manifest's description of this workload (no secrets)."""
        return {
            "type": "sandbox",
            "target": self.target,
            "mode": self.mode,
            "command": self.command,
            "url": self.url,
            "sandbox_id": self.sandbox_id,
            "image": self.image,
            "timeout_s": self.timeout_s,
        }

    # -- lifecycle of the shared resources (runner: before the clock / after the run) --

    async def start(self) -> None:
        """Exec mode: create the shared sandbox (local workspace, or a flash sandbox
        when no `sandbox_id` was given); open the HTTP session. Raises SandboxError /
        RuntimeError when that fails (the run does not start)."""
        if self._flash is not None:
            self._flash.open()
            if self.mode == "exec" and self.sandbox_id is None:
                try:
                    self._own_flash_id = await self._flash_create()
                except _PhaseError as exc:
                    await self._flash.close()
                    raise RuntimeError(f"sandbox workload: cannot create the exec sandbox: {exc}") from exc
        elif self.mode == "exec":
            from benchmaker.agent.sandbox.local import LocalSandbox

            self._local = await LocalSandbox.create(self.repo, default_timeout_s=self.timeout_s, confined=self.confined)

    async def aclose(self) -> None:
        """Delete what `start()` created and close the HTTP session."""
        if self._flash is not None:
            try:
                if self._own_flash_id is not None:
                    await self._flash.call("delete", "DELETE", f"/sandboxes/{self._own_flash_id}")
                    self._own_flash_id = None
            except _PhaseError:
                pass
            finally:
                await self._flash.close()
        if self._local is not None:
            await self._local.close()
            self._local = None

    # -- one sample ---------------------------------------------------------------------

    async def execute(self, seq: int, sample: Sample, t0_ns: int) -> str | None:
        """Run one exec or lifecycle (module docstring); returns the command's output."""
        meta: dict[str, Any] = {}
        sample.meta = meta
        if self._flash is not None:
            return await self._execute_flash(sample, meta)
        return await self._execute_local(sample, meta)

    async def _flash_create(self) -> str:
        assert self._flash is not None
        body: dict[str, Any] = {
            "type": self.sandbox_type,
            "image": self.image,
            "command": ["tail", "-f", "/dev/null"],
            "memory_mb": self.memory_mb,
            "cpu_cores": self.cpu_cores,
        }
        if self.template:
            body["template"] = self.template
        _, data = await self._flash.call("create", "POST", "/sandboxes", body)
        sid = data.get("id") if isinstance(data, dict) else None
        if not isinstance(sid, str) or not sid:
            raise _PhaseError(Outcome.PROTOCOL_ERROR.value, f"create: no sandbox id in answer (got {data!r})")
        return sid

    async def _execute_flash(self, sample: Sample, meta: dict[str, Any]) -> str | None:
        assert self._flash is not None
        pc = time.perf_counter_ns
        sid = self.sandbox_id or self._own_flash_id
        created: str | None = None
        output: str | None = None
        try:
            if self.mode == "lifecycle":
                t = pc()
                try:
                    created = sid = await self._flash_create()
                finally:
                    meta["create_ms"] = (pc() - t) / 1e6
                meta["sandbox_id"] = sid
            if sid is None:
                raise _PhaseError(Outcome.PROTOCOL_ERROR.value, "exec: no sandbox (start() was not called)")
            t = pc()
            try:
                status, data = await self._flash.call(
                    "exec",
                    "POST",
                    f"/sandboxes/{sid}/exec",
                    {"script": self.command, "timeout_ms": int(self.timeout_s * 1000)},
                )
            finally:
                meta["exec_ms"] = (pc() - t) / 1e6
            sample.http_status = status
            if not isinstance(data, dict):
                raise _PhaseError(Outcome.PROTOCOL_ERROR.value, f"exec: answer is not an object (got {data!r})", status)
            output = str(data.get("stdout") or "") + str(data.get("stderr") or "")
            err = str(data.get("error") or "")
            code = data.get("exit_code")
            timed_out = "timeout" in err.lower() or "timed out" in err.lower()
            _judge(
                sample,
                meta,
                None if timed_out or not isinstance(code, int) else code,
                timed_out,
                output,
                self.timeout_s,
                err,
            )
        except _PhaseError as exc:
            sample.outcome = exc.outcome
            sample.error = str(exc)
            if exc.status is not None:
                sample.http_status = exc.status
            if exc.outcome == Outcome.TIMEOUT.value:
                sample.timeout_kind = TimeoutKind.TOTAL.value
        finally:
            if created is not None:
                t = pc()
                try:
                    await self._flash.call("delete", "DELETE", f"/sandboxes/{created}")
                except _PhaseError as exc:
                    if sample.outcome == Outcome.OK.value or sample.outcome == Outcome.GRADED_WRONG.value:
                        sample.outcome = exc.outcome
                        sample.error = str(exc)
                        sample.http_status = exc.status or sample.http_status
                finally:
                    meta["delete_ms"] = (pc() - t) / 1e6
        return output

    async def _execute_local(self, sample: Sample, meta: dict[str, Any]) -> str | None:
        from benchmaker.agent.sandbox import SandboxError
        from benchmaker.agent.sandbox.local import LocalSandbox

        pc = time.perf_counter_ns
        sb = self._local
        created = None
        output: str | None = None
        try:
            if self.mode == "lifecycle":
                t = pc()
                try:
                    created = sb = await LocalSandbox.create(
                        self.repo, default_timeout_s=self.timeout_s, confined=self.confined
                    )
                finally:
                    meta["create_ms"] = (pc() - t) / 1e6
                meta["sandbox_id"] = created.root.name
            if sb is None:
                raise SandboxError("exec: no sandbox (start() was not called)")
            t = pc()
            try:
                res = await sb.exec(self.command, timeout_s=self.timeout_s)
            finally:
                meta["exec_ms"] = (pc() - t) / 1e6
            output = res.output
            _judge(sample, meta, res.exit_code, res.timed_out, output, self.timeout_s, "")
        except SandboxError as exc:
            sample.outcome = Outcome.TRANSPORT_ERROR.value
            sample.error = f"sandbox: {exc}"
        finally:
            if created is not None:
                t = pc()
                try:
                    await created.close()
                finally:
                    meta["delete_ms"] = (pc() - t) / 1e6
        return output


def _judge(
    sample: Sample,
    meta: dict[str, Any],
    exit_code: int | None,
    timed_out: bool,
    output: str,
    timeout_s: float,
    err: str,
) -> None:
    """Outcome of a command that ran: ok (exit 0), graded_wrong (other exit code),
    timeout (the command's deadline)."""
    meta["exit_code"] = exit_code
    sample.output_chars = len(output)
    if timed_out:
        sample.outcome = Outcome.TIMEOUT.value
        sample.timeout_kind = TimeoutKind.TOTAL.value
        sample.error = f"command timed out after {timeout_s:g} s" + (f": {err}" if err else "")
    elif exit_code == 0:
        sample.outcome = Outcome.OK.value
    elif exit_code is None:
        sample.outcome = Outcome.PROTOCOL_ERROR.value
        sample.error = "exec: answer has no integer exit_code" + (f": {err}" if err else "")
    else:
        sample.outcome = Outcome.GRADED_WRONG.value
        sample.grade = f"exit_code={exit_code}"
        sample.error = f"command exited with code {exit_code}: {output[-300:]}"
