"""Process spawning and file-tree work off the measuring event loop.

    sp = await ProcessSpawner.start()       # one helper process, started before measurement
    res = await sp.run(["bash", "-c", "python -m pytest -q"], cwd=ws, env=env,
                       timeout_s=60.0, max_output_bytes=1_000_000)   # 60 s, then killpg
    await sp.copytree(Path("examples/tiny-task"), ws / "workspace", ignore=(".git",))
    await sp.rmtree(ws)
    await sp.aclose()                        # the helper exits; its commands are killed

Why: a sweep point measures model calls on one event loop (loop lag is a validity check,
benchmaker.engine.selfcheck). Spawning a command from that loop blocks it until the child has
exec'd (CPython's vfork path suspends the calling thread until `execve` returns; on a
loaded host the child waits for a CPU first: 3-8 ms per spawn measured on the 2-core
development host at load 5, and tens of ms at the tail), and copying a task repository
in a thread holds the GIL for the Python parts of shutil. benchmarks/execute_lag.py
measures it. The ProcessSpawner moves all of that into a small helper process
(`benchmaker.agent.sandbox.spawner.main` in a child interpreter, its own interpreter, GIL and event loop) that is
started once per sweep point, before the clock starts: the measuring loop then only
writes and reads a few pipe messages per command.

Two Spawners with one behaviour (run_command below is the one implementation):

    InlineSpawner   runs commands on the caller's event loop (asyncio subprocesses) and
                    tree copies in a thread: what LocalSandbox did before; the default
                    of a LocalSandbox created without a spawner.
    ProcessSpawner  the helper process; LocalSandboxFactory.start() starts one per point.

Command semantics (both): `argv` runs with `cwd` and exactly `env`, stdin /dev/null,
stdout and stderr captured (merged on one pipe, interleaved as written, or apart). With
`new_session` the command leads its own session and process group, and the whole group
gets SIGKILL at the timeout, on cancellation, and after the command exits (stray
background children); without it only the process is killed (timeout, cancellation).
`max_output_bytes` keeps the first half and the last half of the output with
TRUNCATION_MARKER between (memory stays bounded); None keeps everything. A timeout is
`timed_out` with `exit_code` None; a signal death is a negative exit code (Popen's).

Wire format (client <-> helper, over the helper's stdin/stdout): frames of
`<II` (little-endian u32 JSON length, u32 payload length), a JSON object, payload bytes.
Requests: {"op": "run"|"copytree"|"rmtree"|"cancel", "id": N, ...}; the helper answers
each (except cancel) with {"id": N, "ok": true, ...} + payload (stdout then stderr), or
{"id": N, "ok": false, "error": {...}}, or {"id": N, "cancelled": true}. The helper
prints {"ready": true, "pid": P} first. At EOF on its stdin it cancels what runs (which
kills the commands' groups) and exits: a helper never outlives its client's pipe.

Errors: a failing command is a result, never an exception. An OSError of the spawn
itself (missing cwd or program) is raised as the same OSError subclass (errno,
strerror, filename kept). A helper that died or cannot start raises SandboxError
naming its pid, exit code and the tail of its stderr, for the pending call and every
later one.
"""

from __future__ import annotations

import asyncio
import errno as errno_mod
import itertools
import os
import shutil
import signal
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from benchmaker.agent.sandbox import TRUNCATION_MARKER, SandboxError

__all__ = ["InlineSpawner", "ProcessSpawner", "RunResult", "Spawner", "run_command"]

_FRAME = struct.Struct("<II")
_READ_CHUNK = 65536
_CANCEL_WAIT_S = 5.0  # how long a cancelled call waits for the helper to confirm the kill
_STDERR_TAIL = 2000
# a run request's options (run_command's keywords) and the RunResult fields of its
# answer beside the output bytes (wire format in the module docstring)
_RUN_OPTIONS = ("cwd", "env", "timeout_s", "max_output_bytes", "merge_stderr", "new_session")
_RESULT_FIELDS = ("exit_code", "timed_out", "truncated", "total_bytes", "duration_ns")


@dataclass(slots=True)
class RunResult:
    """One command's result: `exit_code` (None when killed at the timeout; negative N:
    killed by signal N), `stdout` / `stderr` (bytes; stderr is b"" when merged),
    `timed_out`, `truncated` (output lost its middle), `total_bytes` of output the
    command wrote (before truncation), `duration_ns`: spawn to reap, measured where the
    command ran (in the helper for a ProcessSpawner), in ns."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes = b""
    timed_out: bool = False
    truncated: bool = False
    total_bytes: int = 0
    duration_ns: int = 0


class _Capped:
    """Output kept within `cap` bytes: the first cap//2 and the last cap - cap//2."""

    __slots__ = ("cap", "head", "tail", "total")

    def __init__(self, cap: int | None):
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if self.cap is None:
            self.head.extend(data)
            return
        half = self.cap // 2
        if len(self.head) < half:
            take = half - len(self.head)
            self.head.extend(data[:take])
            data = data[take:]
        self.tail.extend(data)
        if len(self.tail) > self.cap - half:
            del self.tail[: len(self.tail) - (self.cap - half)]

    def value(self) -> tuple[bytes, bool]:
        cap = self.cap
        truncated = cap is not None and self.total > cap
        marker = TRUNCATION_MARKER.format(n=self.total - cap).encode() if cap is not None and truncated else b""
        return bytes(self.head) + marker + bytes(self.tail), truncated


async def _drain(stream: asyncio.StreamReader, sink: _Capped) -> None:
    while True:
        data = await stream.read(_READ_CHUNK)
        if not data:
            return
        sink.add(data)


def _killpg(pid: int) -> None:
    """SIGKILL the process group led by `pid` (the command and its children)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(proc: asyncio.subprocess.Process, new_session: bool) -> None:
    """SIGKILL the command's group (new_session), else the command while it runs."""
    if new_session:
        _killpg(proc.pid)
    elif proc.returncode is None:
        proc.kill()


async def run_command(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: dict[str, str],
    timeout_s: float | None = None,
    max_output_bytes: int | None = None,
    merge_stderr: bool = True,
    new_session: bool = True,
) -> RunResult:
    """Run `argv` on the running event loop with the module docstring's semantics and
    return its RunResult. Raises OSError when the spawn itself fails. Cancelled, it
    kills the command (its group with `new_session`), waits for it, then re-raises."""
    t0 = time.perf_counter_ns()
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            start_new_session=new_session,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
        )
    )
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # cancelled while asyncio was still connecting the pipes of a process that may
        # already run (and have children): let the spawn finish, then kill what it started
        try:
            proc = await spawn
        except OSError:
            raise asyncio.CancelledError from None
        _kill(proc, new_session)
        await proc.wait()
        raise
    out, err = _Capped(max_output_bytes), _Capped(max_output_bytes)
    assert proc.stdout is not None
    readers = [asyncio.ensure_future(_drain(proc.stdout, out))]
    if not merge_stderr:
        assert proc.stderr is not None
        readers.append(asyncio.ensure_future(_drain(proc.stderr, err)))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        timed_out = True
    finally:
        _kill(proc, new_session)
        if proc.returncode is None:
            await proc.wait()
        _, pending = await asyncio.wait(readers, timeout=5.0)
        for r in pending:
            r.cancel()
    stdout, trunc_out = out.value()
    stderr, trunc_err = err.value()
    return RunResult(
        None if timed_out else proc.returncode,
        stdout,
        stderr,
        timed_out,
        trunc_out or trunc_err,
        out.total + err.total,
        time.perf_counter_ns() - t0,
    )


def _copytree(src: str, dst: str, ignore: Sequence[str]) -> None:
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(*ignore) if ignore else None)


class InlineSpawner:
    """Commands on the caller's event loop (run_command), tree copies and removals in a
    thread (asyncio.to_thread): LocalSandbox's behaviour before the ProcessSpawner, kept
    for sandboxes used outside a measured point and as the baseline of
    benchmarks/execute_lag.py. Nothing to start; aclose() does nothing."""

    run = staticmethod(run_command)

    async def copytree(
        self, src: str | os.PathLike[str], dst: str | os.PathLike[str], ignore: Sequence[str] = ()
    ) -> None:
        await asyncio.to_thread(_copytree, os.fspath(src), os.fspath(dst), tuple(ignore))

    async def rmtree(self, path: str | os.PathLike[str]) -> None:
        await asyncio.to_thread(shutil.rmtree, os.fspath(path), True)

    async def aclose(self) -> None:
        return None


def _raise_remote(error: dict[str, Any]) -> None:
    """Raise what the helper reported: an OSError as the same subclass (OSError(errno,
    ...) picks FileNotFoundError, PermissionError, ...), anything else as SandboxError."""
    if error.get("kind") == "os":
        code = error.get("errno")
        if isinstance(code, int):
            raise OSError(
                code,
                error.get("strerror") or os.strerror(code),
                *([error["filename"]] if error.get("filename") is not None else []),
            )
        raise OSError(error.get("strerror") or "spawn failed")
    raise SandboxError(f"sandbox spawner: {error.get('message', 'request failed')}")


class ProcessSpawner:
    """The helper process (module docstring). Start with `await ProcessSpawner.start()`
    on the event loop that will use it (its pipes belong to that loop); close with
    `await aclose()`. Calls from many tasks at once run concurrently in the helper."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self._proc = proc
        self.pid = proc.pid
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[tuple[dict[str, Any], bytes]]] = {}
        self._dead: SandboxError | None = None
        self._stderr_tail = bytearray()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.ensure_future(self._read_replies())
        self._err_reader = asyncio.ensure_future(self._read_stderr())
        self._closing = False

    @classmethod
    async def start(
        cls, *, python: str | None = None, startup_timeout_s: float = 30.0, nice: int = 0
    ) -> ProcessSpawner:
        """Start the helper (`benchmaker.agent.sandbox.spawner.main` in `python`, default: this
        interpreter) in a session of its own (a terminal's Ctrl-C reaches only the
        client, which then cancels what runs) and wait for its ready frame, up to
        `startup_timeout_s` s. `nice` > 0 lowers the CPU priority of the helper and so
        of every command it runs (os.nice; inherited), so that on a contended host the
        measuring loop gets a CPU before them (tool time then grows instead of loop lag).
        Raises SandboxError when it exits or is not ready in time (it is killed)."""
        proc = await asyncio.create_subprocess_exec(
            python or sys.executable,
            "-c",
            f"from benchmaker.agent.sandbox.spawner import main; main({int(nice)})",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        sp = cls(proc)
        try:
            await asyncio.wait_for(asyncio.shield(sp._ready), startup_timeout_s)
        except TimeoutError:
            await sp.aclose()
            raise SandboxError(f"sandbox spawner (pid {sp.pid}) not ready after {startup_timeout_s:g} s") from None
        except BaseException:
            await sp.aclose()
            raise
        return sp

    @property
    def alive(self) -> bool:
        """False once the helper exited or aclose() began."""
        return self._dead is None and not self._closing

    async def _read_replies(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            while True:
                head = await stdout.readexactly(_FRAME.size)
                n_json, n_payload = _FRAME.unpack(head)
                msg = orjson.loads(await stdout.readexactly(n_json))
                payload = await stdout.readexactly(n_payload) if n_payload else b""
                if msg.get("ready"):
                    if not self._ready.done():
                        self._ready.set_result(None)
                    continue
                fut = self._pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result((msg, payload))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except ValueError:  # a frame that is not JSON: the helper is broken, stop it
            self._proc.kill()
        finally:
            await self._mark_dead()

    async def _read_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        while data := await stderr.read(_READ_CHUNK):
            self._stderr_tail.extend(data)
            del self._stderr_tail[:-_STDERR_TAIL]

    async def _mark_dead(self) -> None:
        try:
            code = await asyncio.wait_for(self._proc.wait(), 5.0)
        except TimeoutError:
            code = None
        try:
            await asyncio.wait_for(asyncio.shield(self._err_reader), 1.0)
        except (TimeoutError, asyncio.CancelledError):
            pass
        tail = self._stderr_tail.decode("utf-8", "replace").strip()
        how = "was closed" if self._closing else f"exited with code {code}"
        self._dead = SandboxError(f"sandbox spawner (pid {self.pid}) {how}" + (f": {tail[-500:]}" if tail else ""))
        if not self._ready.done():
            self._ready.set_exception(self._dead)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self._dead)
        self._pending.clear()

    def _send(self, msg: dict[str, Any]) -> None:
        if self._dead is not None:
            raise self._dead
        if self._closing:
            raise SandboxError(f"sandbox spawner (pid {self.pid}) was closed")
        stdin = self._proc.stdin
        assert stdin is not None
        body = orjson.dumps(msg)
        try:
            stdin.write(_FRAME.pack(len(body), 0) + body)
        except (ConnectionError, RuntimeError) as exc:  # the helper is gone; the reader reports why
            raise SandboxError(f"sandbox spawner (pid {self.pid}) is gone: {exc}") from exc

    async def _call(self, msg: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        rid = msg["id"] = next(self._ids)
        fut: asyncio.Future[tuple[dict[str, Any], bytes]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            self._send(msg)
        except BaseException:
            self._pending.pop(rid, None)
            raise
        try:
            reply, payload = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # kill it in the helper and wait (bounded) until it confirms, as run_command
            # waits for its killed process: nothing of the call outlives the cancellation
            if not fut.done() and self.alive:
                try:
                    self._send({"op": "cancel", "id": rid})
                    await asyncio.wait([fut], timeout=_CANCEL_WAIT_S)
                except SandboxError:
                    pass
            self._pending.pop(rid, None)
            raise
        if reply.get("cancelled"):  # not by us: the helper is stopping (aclose, or EOF)
            how = "was closed" if self._closing else "stopped"
            raise SandboxError(f"sandbox spawner (pid {self.pid}) {how} while the call ran")
        if not reply.get("ok"):
            _raise_remote(reply.get("error") or {})
        return reply, payload

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: dict[str, str],
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        merge_stderr: bool = True,
        new_session: bool = True,
    ) -> RunResult:
        """run_command in the helper. Raises OSError for a failed spawn, SandboxError
        when the helper is gone."""
        reply, payload = await self._call(
            {
                "op": "run",
                "argv": list(argv),
                "cwd": os.fspath(cwd),
                "env": env,
                "timeout_s": timeout_s,
                "max_output_bytes": max_output_bytes,
                "merge_stderr": merge_stderr,
                "new_session": new_session,
            }
        )
        n_out = reply["n_stdout"]
        return RunResult(stdout=payload[:n_out], stderr=payload[n_out:], **{k: reply[k] for k in _RESULT_FIELDS})

    async def copytree(
        self, src: str | os.PathLike[str], dst: str | os.PathLike[str], ignore: Sequence[str] = ()
    ) -> None:
        """shutil.copytree(src, dst, symlinks=True, ignore=ignore_patterns(*ignore)) in
        the helper. Raises OSError (e.g. FileExistsError) as shutil does."""
        await self._call({"op": "copytree", "src": os.fspath(src), "dst": os.fspath(dst), "ignore": list(ignore)})

    async def rmtree(self, path: str | os.PathLike[str]) -> None:
        """shutil.rmtree(path, ignore_errors=True) in the helper."""
        await self._call({"op": "rmtree", "path": os.fspath(path)})

    async def aclose(self) -> None:
        """Close the helper's stdin (it kills what still runs and exits) and wait for
        it: 5 s, then SIGKILL. Pending calls fail with SandboxError. Idempotent."""
        self._closing = True
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), 5.0)
        except TimeoutError:
            self._proc.kill()
            await self._proc.wait()
        await asyncio.gather(self._reader, self._err_reader, return_exceptions=True)


Spawner = InlineSpawner | ProcessSpawner
"""Where LocalSandbox runs commands and copies trees (module docstring)."""


# ------------------------------------------------------------------------------------
# The helper process: python -c "from benchmaker.agent.sandbox.spawner import main; main()"


async def _helper_main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0))
    w_transport, w_protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(1, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(w_transport, w_protocol, None, loop)
    tasks: dict[int, asyncio.Task[None]] = {}

    def reply(msg: dict[str, Any], payload: bytes = b"") -> None:
        body = orjson.dumps(msg)
        writer.write(_FRAME.pack(len(body), len(payload)) + body + payload)

    async def handle(msg: dict[str, Any]) -> None:
        rid = msg["id"]
        try:
            op = msg["op"]
            if op == "run":
                res = await run_command(msg["argv"], **{k: msg[k] for k in _RUN_OPTIONS})
                result = {k: getattr(res, k) for k in _RESULT_FIELDS}
                reply({"id": rid, "ok": True, **result, "n_stdout": len(res.stdout)}, res.stdout + res.stderr)
            elif op == "copytree":
                await asyncio.to_thread(_copytree, msg["src"], msg["dst"], tuple(msg["ignore"]))
                reply({"id": rid, "ok": True})
            elif op == "rmtree":
                await asyncio.to_thread(shutil.rmtree, msg["path"], True)
                reply({"id": rid, "ok": True})
            else:
                reply({"id": rid, "ok": False, "error": {"kind": "other", "message": f"unknown op {op!r}"}})
        except asyncio.CancelledError:
            reply({"id": rid, "cancelled": True})
        except OSError as exc:
            reply(
                {
                    "id": rid,
                    "ok": False,
                    "error": {
                        "kind": "os",
                        "errno": exc.errno,
                        "strerror": exc.strerror,
                        "filename": None if exc.filename is None else str(exc.filename),
                    },
                }
            )
        except Exception as exc:  # every request gets an answer
            reply({"id": rid, "ok": False, "error": {"kind": "other", "message": f"{type(exc).__name__}: {exc}"}})
        finally:
            tasks.pop(rid, None)
        await writer.drain()

    reply({"ready": True, "pid": os.getpid()})
    try:
        while True:
            try:
                head = await reader.readexactly(_FRAME.size)
                n_json, n_payload = _FRAME.unpack(head)
                msg = orjson.loads(await reader.readexactly(n_json))
                if n_payload:
                    await reader.readexactly(n_payload)
            except asyncio.IncompleteReadError:
                break  # the client closed the pipe (or died): stop
            if msg.get("op") == "cancel":
                task = tasks.get(msg.get("id"))
                if task is not None:
                    task.cancel()
                continue
            tasks[msg["id"]] = asyncio.ensure_future(handle(msg))
    finally:
        for task in list(tasks.values()):
            task.cancel()
        if tasks:
            await asyncio.wait(list(tasks.values()), timeout=10.0)
        try:
            await writer.drain()
        except ConnectionError:
            pass


def main(nice: int = 0) -> None:
    """Entry point of the helper: serve requests on stdin/stdout until EOF, first
    lowering its priority by `nice` (os.nice) when > 0. SIGINT is ignored (the client
    decides what to cancel); a broken stdout ends the helper."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if nice > 0:
        os.nice(nice)
    try:
        asyncio.run(_helper_main())
    except (BrokenPipeError, ConnectionError):
        pass
    except OSError as exc:
        if exc.errno != errno_mod.EPIPE:
            raise
