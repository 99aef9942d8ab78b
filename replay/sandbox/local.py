"""Local sandbox: a per-episode temp copy of the task repository and bash subprocesses.

    sb = await LocalSandbox.create(Path("examples/tiny-task"))   # copies, git-inits
    res = await sb.exec("python -m pytest -q", timeout_s=60.0)   # 60 s, then killpg
    patch = await sb.diff()
    await sb.close()                                              # removes the temp dir

Each command runs as `bash -c COMMAND` in its own session (`start_new_session`), so the
command and everything it spawned form one process group: at the timeout, and after
the command exits (stray background children), the group is killed with
`os.killpg(pgid, SIGKILL)`. Output (stdout and stderr on one pipe, interleaved) is
capped at `max_output_bytes`; the middle is cut with a marker.

Not a security boundary: commands run as the current user on this host. File tools
refuse paths that resolve outside the workspace. The environment is minimal (PATH,
HOME inside the temp dir, LANG, plus `env`), so API keys of the caller do not leak
into commands; the harness's Python is first on PATH so `python -m pytest` finds the
same interpreter and packages.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from replay.sandbox import TRUNCATION_MARKER, ExecResult, SandboxError

_GIT = ["git", "-c", "user.name=benchmaker", "-c", "user.email=benchmaker@localhost", "-c", "commit.gpgsign=false"]
_IGNORED = "__pycache__/\n*.pyc\n.pytest_cache/\n"


class LocalSandbox:
    """A temp workspace under `root` (a fresh temp dir); `workdir` is `root/workspace`.
    Create with `await LocalSandbox.create(repo)`."""

    def __init__(self, root: Path, *, env: dict[str, str], max_output_bytes: int, default_timeout_s: float):
        self.root = root
        self.workdir = str(root / "workspace")
        self._env = env
        self.max_output_bytes = max_output_bytes
        self.default_timeout_s = default_timeout_s

    @classmethod
    async def create(
        cls,
        repo: Path | None = None,
        *,
        env: dict[str, str] | None = None,
        max_output_bytes: int = 1_000_000,
        default_timeout_s: float = 180.0,
        tmp_dir: Path | None = None,
    ) -> LocalSandbox:
        """Copy `repo` (without its `.git`) into a fresh temp workspace, or start an
        empty one when `repo` is None, and commit it as the git baseline.
        Raises SandboxError when `repo` is not a directory or git fails."""
        if repo is not None and not Path(repo).is_dir():
            raise SandboxError(f"{repo}: task repository is not a directory")
        root = Path(tempfile.mkdtemp(prefix="bm-sandbox-", dir=tmp_dir))
        ws = root / "workspace"
        home = root / "home"
        home.mkdir()
        try:
            if repo is not None:
                await asyncio.to_thread(
                    shutil.copytree, repo, ws, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache"),
                )
            else:
                ws.mkdir()
            path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])
            full_env = {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                        "PYTHONDONTWRITEBYTECODE": "1", "TERM": "dumb", **(env or {})}
            sb = cls(root, env=full_env, max_output_bytes=max_output_bytes, default_timeout_s=default_timeout_s)
            for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "baseline"]):
                await sb._git(*args)
                if args[0] == "init":
                    (ws / ".git" / "info").mkdir(parents=True, exist_ok=True)
                    (ws / ".git" / "info" / "exclude").write_text(_IGNORED)
            return sb
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise

    async def _git(self, *args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            *_GIT, *args, cwd=self.workdir, env=self._env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise SandboxError(f"git {' '.join(args)} failed ({proc.returncode}): {err.decode(errors='replace')}")
        return out.decode("utf-8", "replace")

    async def exec(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        """Run `bash -c command` in `workdir`; see the module docstring. `timeout_s`
        None uses `default_timeout_s`. Never raises for the command's own failure."""
        timeout = self.default_timeout_s if timeout_s is None else timeout_s
        t0 = time.perf_counter_ns()
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=self.workdir, env=self._env, start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        assert proc.stdout is not None
        cap = self.max_output_bytes
        half = cap // 2
        head = bytearray()
        tail = bytearray()
        total = 0

        async def _read() -> None:
            # keep the first `half` bytes and the last `cap - half`: memory stays bounded
            nonlocal total
            while True:
                data = await proc.stdout.read(65536)
                if not data:
                    return
                total += len(data)
                if len(head) < half:
                    take = half - len(head)
                    head.extend(data[:take])
                    data = data[take:]
                tail.extend(data)
                if len(tail) > cap - half:
                    del tail[: len(tail) - (cap - half)]

        reader = asyncio.ensure_future(_read())
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
        finally:
            _killpg(proc.pid)
            if proc.returncode is None:
                await proc.wait()
            try:
                await asyncio.wait_for(reader, 5.0)
            except TimeoutError:
                reader.cancel()
        truncated = total > cap
        data = bytes(head) + (TRUNCATION_MARKER.format(n=total - cap).encode() if truncated else b"") + bytes(tail)
        return ExecResult(
            exit_code=None if timed_out else proc.returncode,
            output=data.decode("utf-8", "replace"),
            timed_out=timed_out,
            truncated=truncated,
            duration_ns=time.perf_counter_ns() - t0,
        )

    def _resolve(self, path: str) -> Path:
        ws = Path(self.workdir).resolve()
        p = Path(path)
        full = (p if p.is_absolute() else ws / p).resolve()
        if full != ws and ws not in full.parents:
            raise SandboxError(f"{path}: path is outside the workspace")
        return full

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self._resolve(path).read_bytes)

    async def write_file(self, path: str, data: bytes) -> None:
        full = self._resolve(path)

        def _write() -> None:
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(data)

        await asyncio.to_thread(_write)

    async def diff(self) -> str:
        """`git diff` of the work tree (new files included) against the baseline."""
        await self._git("add", "-A")
        return await self._git("-c", "core.quotepath=off", "diff", "--cached", "--binary", "HEAD")

    async def close(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self.root, True)


def _killpg(pid: int) -> None:
    """SIGKILL the process group led by `pid` (the command and its children)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
