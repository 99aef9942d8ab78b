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

Confined by default: every command (and the `git` of `diff()`) runs under bubblewrap
(benchmaker.agent.sandbox.confine; what it sees: docs/execute-mode-sandbox.md); as root
the workspace is handed to the unprivileged user after the baseline commit, and files
written by `write_file` too. `confined=False` runs commands
unconfined as the current user on this host (`--sandbox none`): not a security
boundary. File tools refuse paths that resolve outside the workspace either way. The
environment is minimal (PATH, HOME inside the temp dir, LANG, plus `env`), so API keys
of the caller do not leak into commands; the harness's Python is first on PATH so
`python -m pytest` finds the same interpreter and packages.

Where commands run: every process (bash, git) and the tree copy and removal go through
a Spawner (benchmaker.agent.sandbox.spawner). A LocalSandboxFactory that was started (sweep
points start theirs before the clock, benchmaker.workloads.agent_episode) hands its sandboxes one
ProcessSpawner, a helper process, so nothing forks from the measuring event loop; a
sandbox created on its own uses the InlineSpawner (same semantics, on the caller's loop).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmaker.agent.sandbox import PRIVATE_ENV, ExecResult, SandboxError
from benchmaker.agent.sandbox.confine import Confinement, confinement
from benchmaker.agent.sandbox.spawner import InlineSpawner, ProcessSpawner, RunResult, Spawner

_GIT = ["git", "-c", "user.name=benchmaker", "-c", "user.email=benchmaker@localhost", "-c", "commit.gpgsign=false"]
_IGNORED = "__pycache__/\n*.pyc\n.pytest_cache/\n"


def agent_ro_paths(argv: list[str], workdir: Path) -> list[str]:
    """The folders a confined command-mode agent `argv` gets bound read-only: for each
    item that is an existing absolute path outside `workdir` (and not one of its
    parents), the path itself when it is a folder, else its folder; when that folder
    is the `bin` of a Python virtual environment (its parent holds `pyvenv.cfg`, PEP
    405), the environment's root instead, so that its interpreter or console script
    finds the environment's site-packages. In argv order, without repeats."""
    out: list[str] = []
    for item in argv:
        p = Path(item)
        if not p.is_absolute() or not p.exists() or p == workdir or workdir in p.parents or p in workdir.parents:
            continue
        folder = p if p.is_dir() else p.parent
        if folder.name == "bin" and (folder.parent / "pyvenv.cfg").is_file():
            folder = folder.parent
        if str(folder) not in out:
            out.append(str(folder))
    return out


class LocalSandbox:
    """A temp workspace under `root` (a fresh temp dir); `workdir` is `root/workspace`;
    `spawner` runs its processes (not owned: closing the sandbox leaves it running);
    `confinement` wraps them (None: unconfined). Create with
    `await LocalSandbox.create(repo)`."""

    def __init__(
        self,
        root: Path,
        *,
        env: dict[str, str],
        max_output_bytes: int,
        default_timeout_s: float,
        spawner: Spawner | None = None,
        confinement: Confinement | None = None,
    ):
        self.root = root
        self.workdir = str(root / "workspace")
        self.home = str(root / "home")
        self.confinement = confinement
        self._env = env
        self.max_output_bytes = max_output_bytes
        self.default_timeout_s = default_timeout_s
        self.spawner: Spawner = spawner or InlineSpawner()

    @classmethod
    async def create(
        cls,
        repo: Path | None = None,
        *,
        env: dict[str, str] | None = None,
        max_output_bytes: int = 1_000_000,
        default_timeout_s: float = 180.0,
        tmp_dir: Path | None = None,
        spawner: Spawner | None = None,
        confined: bool = True,
    ) -> LocalSandbox:
        """Copy `repo` (without its `.git`) into a fresh temp workspace, or start an
        empty one when `repo` is None, and commit it as the git baseline. `spawner`:
        where processes and the copy run (default InlineSpawner, module docstring).
        `confined`: run commands under bubblewrap (module docstring). Raises
        ConfinementError (a SandboxError) when `confined` and bwrap is absent or
        unusable, SandboxError when `repo` is not a directory, git fails or the spawner
        is gone."""
        if repo is not None and not Path(repo).is_dir():
            raise SandboxError(f"{repo}: task repository is not a directory")
        conf = confinement() if confined else None
        spawner = spawner or InlineSpawner()
        root = Path(tempfile.mkdtemp(prefix="bm-sandbox-", dir=tmp_dir))
        ws = root / "workspace"
        home = root / "home"
        home.mkdir()
        try:
            if repo is not None:
                await spawner.copytree(repo, ws, ignore=(".git", "__pycache__", ".pytest_cache"))
            else:
                ws.mkdir()
            path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])
            full_env = {
                "PATH": path,
                "HOME": str(home),
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                "TERM": "dumb",
                **(env or {}),
            }
            sb = cls(
                root,
                env=full_env,
                max_output_bytes=max_output_bytes,
                default_timeout_s=default_timeout_s,
                spawner=spawner,
                confinement=conf,
            )
            # the baseline is committed by the caller on the untouched copy; from here on
            # every git call on the tree runs confined (a command may rewrite .git/config)
            for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "baseline"]):
                await sb._git(*args, confined=False)
                if args[0] == "init":
                    (ws / ".git" / "info").mkdir(parents=True, exist_ok=True)
                    (ws / ".git" / "info" / "exclude").write_text(_IGNORED)
            if conf is not None and conf.uid is not None:
                res = await spawner.run(
                    ["chown", "-R", "--no-dereference", f"{conf.uid}:{conf.gid}", str(ws), str(home)],
                    cwd=str(root),
                    env=full_env,
                    merge_stderr=True,
                    new_session=False,
                )
                if res.exit_code != 0:
                    raise SandboxError(
                        f"chown of the workspace failed ({res.exit_code}): "
                        f"{res.stdout.decode(errors='replace').strip()}"
                    )
            return sb
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise

    def _argv(self, argv: list[str]) -> list[str]:
        if self.confinement is None:
            return argv
        return self.confinement.wrap(argv, workdir=self.workdir, home=self.home)

    async def _git(self, *args: str, confined: bool = True) -> str:
        argv = self._argv([*_GIT, *args]) if confined else [*_GIT, *args]
        res = await self.spawner.run(
            argv,
            cwd=self.workdir,
            env=self._env,
            merge_stderr=False,
            new_session=self.confinement is not None and confined,
        )
        if res.exit_code != 0:
            raise SandboxError(f"git {' '.join(args)} failed ({res.exit_code}): {res.stderr.decode(errors='replace')}")
        return res.stdout.decode("utf-8", "replace")

    async def exec(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        """Run `bash -c command` in `workdir`; see the module docstring. `timeout_s`
        None uses `default_timeout_s`. Never raises for the command's own failure;
        raises SandboxError when the spawner is gone, OSError when bash cannot start.

        `duration_ns` is the wall time of the command as the calling episode sees it:
        perf_counter_ns from this call until its result is back on the caller's event
        loop, so it holds the spawn, the command's run, the output capture, the kill of
        its group, with a ProcessSpawner two pipe messages (~0.1-0.3 ms) and, confined,
        bwrap's setup of the sandbox (benchmarks/bwrap_overhead.py prints it)."""
        timeout = self.default_timeout_s if timeout_s is None else timeout_s
        t0 = time.perf_counter_ns()
        res = await self.spawner.run(
            self._argv(["bash", "-c", command]),
            cwd=self.workdir,
            env=self._env,
            timeout_s=timeout,
            max_output_bytes=self.max_output_bytes,
        )
        return ExecResult(
            exit_code=res.exit_code,
            output=res.stdout.decode("utf-8", "replace"),
            timed_out=res.timed_out,
            truncated=res.truncated,
            duration_ns=time.perf_counter_ns() - t0,
        )

    def agent_dir(self) -> str:
        """A directory beside the workspace for a command-mode agent's prompt file and
        the proxy's Unix socket (`root/agent`, created on first call; the sandbox's
        user owns it when confined as root). Bound read-write by `run_agent`."""
        d = self.root / "agent"
        if not d.is_dir():
            d.mkdir(mode=0o700)
            conf = self.confinement
            if conf is not None and conf.uid is not None:
                os.chown(d, conf.uid, conf.gid or 0)
        return str(d)

    async def run_agent(
        self, argv: list[str], *, env: dict[str, str], timeout_s: float, proxy_port: int, proxy_socket: str | None
    ) -> RunResult:
        """Run a command-mode agent (`argv`) in the workspace. Confined, it runs under
        bubblewrap like a tool command, its environment the sandbox's with `env` over
        it, its 127.0.0.1:`proxy_port` relayed to the host's Unix socket `proxy_socket`
        (inside agent_dir(); benchmaker.agent.sandbox.relay) and no other network; each
        argv item that is an existing absolute path outside the workspace is bound
        read-only (agent_ro_paths), so the agent's program is visible.
        Unconfined (or `proxy_socket` None), it runs on this host as before: the
        caller's environment with `env` over it. Returns the spawner's RunResult
        (`timeout_s` then its group is killed). Raises SandboxError when the spawner
        is gone, OSError when it cannot start."""
        conf = self.confinement
        if conf is None or proxy_socket is None:
            inherited = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
            return await self.spawner.run(argv, cwd=self.workdir, env={**inherited, **env}, timeout_s=timeout_s)
        from benchmaker.agent.sandbox.relay import relay_argv

        extra = agent_ro_paths(argv, Path(self.workdir))
        wrapped = conf.wrap(
            relay_argv(sys.executable, proxy_port, proxy_socket, argv),
            workdir=self.workdir,
            home=self.home,
            rw_paths=[self.agent_dir()],
            ro_paths=extra,
        )
        return await self.spawner.run(wrapped, cwd=self.workdir, env={**self._env, **env}, timeout_s=timeout_s)

    def _resolve(self, path: str) -> Path:
        ws = Path(self.workdir).resolve()
        p = Path(path)
        full = (p if p.is_absolute() else ws / p).resolve()
        if full != ws and ws not in full.parents:
            raise SandboxError(f"{path}: path is outside the workspace")
        if full.exists() and not (full.is_file() or full.is_dir()):
            # a FIFO or device a command made would block this process's open() for good
            raise SandboxError(f"{path}: not a regular file (refused like a path outside the workspace)")
        return full

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self._resolve(path).read_bytes)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write `data` to `path` (inside the workspace), creating its parents; confined
        as root, what it creates is handed to the sandbox's user."""
        full = self._resolve(path)
        conf = self.confinement
        owner = (conf.uid, conf.gid or 0) if conf is not None and conf.uid is not None else None

        def _write() -> None:
            made = [p for p in reversed(full.parents) if not p.exists()]
            full.parent.mkdir(parents=True, exist_ok=True)
            new = not full.exists()
            full.write_bytes(data)
            if owner is not None:
                for p in [*made, *([full] if new else [])]:
                    os.lchown(p, *owner)

        await asyncio.to_thread(_write)

    async def diff(self) -> str:
        """`git diff` of the work tree (new files included) against the baseline."""
        await self._git("add", "-A")
        return await self._git("-c", "core.quotepath=off", "diff", "--cached", "--binary", "HEAD")

    async def close(self) -> None:
        """Remove the temp dir (through the spawner; in a thread when it is gone)."""
        try:
            await self.spawner.rmtree(self.root)
        except SandboxError:
            await asyncio.to_thread(shutil.rmtree, self.root, True)


class LocalSandboxFactory:
    """A SandboxFactory (benchmaker.agent.harness) making a LocalSandbox per episode from the
    task's repo (an empty workspace when the task has none); `create_kwargs` go to
    LocalSandbox.create, the task's `env` (TaskSpec.env) over their `env`. Confined
    (the default, `confined=False` to run unconfined), it probes bwrap when made and
    raises ConfinementError there, before any episode.

        factory = LocalSandboxFactory()
        await factory.start()          # before measurement: one ProcessSpawner
        sb = await factory(task)       # per episode; the harness closes it
        await factory.aclose()         # after the point: the helper exits

    Started, every sandbox of the factory runs its processes and tree copies in the
    factory's ProcessSpawner (benchmaker.agent.sandbox.spawner); never started (a single episode
    outside a measured point), they use the InlineSpawner. Use it on the event loop
    that started it. start() raises SandboxError when the helper cannot start."""

    def __init__(self, *, nice: int = 0, **create_kwargs: Any):
        if create_kwargs.get("confined", True):
            confinement()
        self.create_kwargs = create_kwargs
        self.nice = nice
        self.spawner: ProcessSpawner | None = None

    async def start(self) -> None:
        """Start the ProcessSpawner (idempotent), at `nice` (ProcessSpawner.start)."""
        if self.spawner is None:
            self.spawner = await ProcessSpawner.start(nice=self.nice)

    async def aclose(self) -> None:
        """Stop the ProcessSpawner, killing whatever still runs in it (idempotent)."""
        sp, self.spawner = self.spawner, None
        if sp is not None:
            await sp.aclose()

    async def __call__(self, task: Any) -> LocalSandbox:
        repo = getattr(task, "repo", None) if task is not None else None
        kwargs = self.create_kwargs
        task_env = getattr(task, "env", None) if task is not None else None
        if task_env:
            kwargs = {**kwargs, "env": {**(kwargs.get("env") or {}), **task_env}}
        return await LocalSandbox.create(repo, spawner=self.spawner, **kwargs)
