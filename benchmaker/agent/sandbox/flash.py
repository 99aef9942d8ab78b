"""Flash Sandbox over HTTP (httpx): create / exec / delete against a coordinator.

    sb = await FlashSandbox.create("http://127.0.0.1:8080", image="swe-task:latest",
                                   workdir="/testbed")
    res = await sb.exec("python -m pytest -q", timeout_s=60.0)
    await sb.close()                                   # DELETE /sandboxes/{id}

Wire API (the `flash-sandbox` 0.4 SDK's coordinator `/sandboxes` API, read from its
`_async_client.py` / `_payloads.py`):

    POST   {base}/sandboxes             {"type", "image", "command", "memory_mb",
                                         "cpu_cores", ["template"], ["env"]} -> {"id": ...}
    POST   {base}/sandboxes/{id}/exec   {"script": str, "timeout_ms": int}
                                         -> {"stdout", "stderr", "exit_code", ["error"]}
    DELETE {base}/sandboxes/{id}

Retries: a 502 or 503 answer and a connect failure (nothing dispatched) are retried
up to `retries` times with exponential backoff `backoff_s * 2**attempt` (capped at
`max_backoff_s`); an error envelope whose `code` is `execution_uncertain` is not
retried (the SDK's rule: the command may have run). Other statuses raise SandboxError
with the status and body.

The task repository is expected in the image at `workdir`; `create` commits the
work tree as a git baseline (`git init` when it has no `.git`) so `diff()` works.
Files move through exec (base64), so one file is limited by the coordinator's
script size. Commands run as `cd WORKDIR && (COMMAND) 2>&1`, so `output` keeps
stdout and stderr interleaved like the local sandbox.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
import time
from dataclasses import KW_ONLY, dataclass
from typing import Any

import httpx

from benchmaker.agent.sandbox import ExecResult, SandboxError, truncate_middle

_RETRY_STATUS = (502, 503)
_GIT = "git -c user.name=benchmaker -c user.email=benchmaker@localhost -c commit.gpgsign=false"


@dataclass(eq=False)
class FlashSandbox:
    """One Flash sandbox; create with `await FlashSandbox.create(base_url, ...)`.
    `n_retries` counts the requests retried so far (module docstring)."""

    _client: httpx.AsyncClient
    id: str
    workdir: str
    _: KW_ONLY
    retries: int
    backoff_s: float
    max_backoff_s: float
    max_output_bytes: int
    default_timeout_s: float
    n_retries: int = 0

    @classmethod
    async def create(
        cls,
        base_url: str,
        *,
        image: str,
        workdir: str = "/workspace",
        type: str = "",
        template: str | None = None,
        memory_mb: int = 2048,
        cpu_cores: float = 1.0,
        env: dict[str, str] | None = None,
        api_key: str | None = None,
        retries: int = 4,
        backoff_s: float = 0.25,
        max_backoff_s: float = 5.0,
        max_output_bytes: int = 1_000_000,
        default_timeout_s: float = 180.0,
        http_timeout_s: float = 600.0,
    ) -> FlashSandbox:
        """POST /sandboxes, then commit the work tree as the git baseline. Raises
        SandboxError when the coordinator refuses (after retries) or answers no id."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        client = httpx.AsyncClient(base_url=base_url.rstrip("/") + "/", headers=headers, timeout=http_timeout_s)
        payload: dict[str, Any] = {
            "type": type,
            "image": image,
            "command": ["tail", "-f", "/dev/null"],
            "memory_mb": memory_mb,
            "cpu_cores": cpu_cores,
        }
        if template:
            payload["template"] = template
        if env:
            payload["env"] = env
        probe = cls(
            client,
            "",
            workdir,
            retries=retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            max_output_bytes=max_output_bytes,
            default_timeout_s=default_timeout_s,
        )
        try:
            data = await probe._request("POST", "sandboxes", json=payload)
            sid = data.get("id") if isinstance(data, dict) else None
            if not isinstance(sid, str) or not sid:
                raise SandboxError(f"POST {base_url}/sandboxes: no sandbox id in answer (got {data!r})")
            probe.id = sid
            q = shlex.quote(workdir)
            res = await probe.exec(
                f"cd {q} && {{ [ -d .git ] || {_GIT} init -q; }} && "
                f"printf '__pycache__/\\n*.pyc\\n.pytest_cache/\\n' >> .git/info/exclude && "
                f"{_GIT} add -A && {_GIT} commit -q --allow-empty -m baseline",
                timeout_s=120.0,
            )
            if res.exit_code != 0:
                raise SandboxError(f"sandbox {sid}: git baseline failed ({res.exit_code}): {res.output[-500:]}")
        except BaseException:
            if probe.id:
                try:
                    await probe._request("DELETE", f"sandboxes/{probe.id}")
                except SandboxError:
                    pass
            await client.aclose()
            raise
        return probe

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                resp = await self._client.request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt < self.retries:
                    await self._backoff(attempt)
                    attempt += 1
                    continue
                raise SandboxError(f"{method} {path}: cannot connect: {exc}") from exc
            except httpx.HTTPError as exc:
                raise SandboxError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            if resp.status_code in _RETRY_STATUS and attempt < self.retries and not _uncertain(resp):
                await self._backoff(attempt)
                attempt += 1
                continue
            if resp.status_code >= 400:
                raise SandboxError(f"{method} {path}: HTTP {resp.status_code}: {resp.text[:500]}")
            if not resp.content:
                return None
            try:
                return resp.json()
            except ValueError as exc:
                raise SandboxError(f"{method} {path}: answer is not JSON (got {resp.text[:200]!r})") from exc

    async def _backoff(self, attempt: int) -> None:
        self.n_retries += 1
        await asyncio.sleep(min(self.backoff_s * (2**attempt), self.max_backoff_s))

    async def exec(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        """Run `command` in `workdir` (module docstring). A timeout is reported by the
        coordinator's `error` mentioning "timeout" (then `exit_code` None)."""
        timeout = self.default_timeout_s if timeout_s is None else timeout_s
        script = f"cd {shlex.quote(self.workdir)} && ( {command}\n) 2>&1"
        t0 = time.perf_counter_ns()
        data = await self._request(
            "POST", f"sandboxes/{self.id}/exec", json={"script": script, "timeout_ms": int(timeout * 1000)}
        )
        if not isinstance(data, dict):
            raise SandboxError(f"sandbox {self.id}: exec answer is not an object (got {data!r})")
        err = str(data.get("error") or "")
        timed_out = "timeout" in err.lower() or "timed out" in err.lower()
        raw = (str(data.get("stdout") or "") + str(data.get("stderr") or "")).encode("utf-8", "replace")
        out, truncated = truncate_middle(raw, self.max_output_bytes)
        code = data.get("exit_code")
        return ExecResult(
            exit_code=None if timed_out or not isinstance(code, int) else code,
            output=out.decode("utf-8", "replace"),
            timed_out=timed_out,
            truncated=truncated,
            duration_ns=time.perf_counter_ns() - t0,
        )

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"

    async def read_file(self, path: str) -> bytes:
        res = await self.exec(f"base64 -w0 < {shlex.quote(self._path(path))}", timeout_s=60.0)
        if res.exit_code != 0:
            raise FileNotFoundError(path)
        return base64.b64decode(res.output.strip())

    async def write_file(self, path: str, data: bytes) -> None:
        full = shlex.quote(self._path(path))
        b64 = base64.b64encode(data).decode()
        res = await self.exec(f'mkdir -p "$(dirname {full})" && printf %s {b64} | base64 -d > {full}', timeout_s=60.0)
        if res.exit_code != 0:
            raise SandboxError(f"{path}: write failed ({res.exit_code}): {res.output[-300:]}")

    async def diff(self) -> str:
        res = await self.exec(
            f"{_GIT} add -A && {_GIT} -c core.quotepath=off diff --cached --binary HEAD", timeout_s=120.0
        )
        if res.exit_code != 0:
            raise SandboxError(f"sandbox {self.id}: git diff failed ({res.exit_code}): {res.output[-300:]}")
        return res.output

    async def close(self) -> None:
        """DELETE /sandboxes/{id} (retried on 502/503) and close the HTTP client."""
        try:
            await self._request("DELETE", f"sandboxes/{self.id}")
        finally:
            await self._client.aclose()


def _uncertain(resp: httpx.Response) -> bool:
    try:
        body = resp.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("code") == "execution_uncertain"
