"""Loopback for a confined command-mode agent: inside the sandbox's own network
namespace (no route anywhere), listen on 127.0.0.1:PORT and relay every connection to
one Unix socket bound in from the host (the measuring proxy's), then run the agent and
exit with its exit code.

    argv = relay_argv(sys.executable, 43121, "/tmp/bm-sandbox-x/agent/proxy.sock", ["pi", "-p", "..."])
    # [python, "-I", "-c", <this file>, "43121", "/tmp/.../proxy.sock", "--", "pi", "-p", "..."]

The agent so reaches its base URL (http://127.0.0.1:PORT/v1, the same URL as on the
host) and nothing else: any other address or port is refused or unreachable. The
script runs in the sandbox's Python with the standard library only (`-I`: no user site,
no environment variables, no current directory on sys.path), one thread per direction
of each connection. Its exit code is the agent's (a negative N from the host's view
when a signal killed the agent becomes 128 + N).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["relay_argv"]


def relay_argv(python: str, port: int, unix_path: str, argv: list[str]) -> list[str]:
    """The argv that runs `argv` behind a relay from 127.0.0.1:`port` to `unix_path`
    (module docstring); `python` is the interpreter inside the sandbox."""
    return [python, "-I", "-c", Path(__file__).read_text(encoding="utf-8"), str(port), unix_path, "--", *argv]


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _connection(client: socket.socket, unix_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(unix_path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, unix_path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_connection, args=(client, unix_path), daemon=True).start()


def main(args: list[str]) -> int:
    """`PORT UNIX_PATH -- ARGV...`: relay, run ARGV, return its exit code."""
    port, unix_path, sep, *argv = args
    if sep != "--" or not argv:
        print("relay: usage: PORT UNIX_PATH -- ARGV...", file=sys.stderr)
        return 2
    listener = socket.create_server(("127.0.0.1", int(port)))
    threading.Thread(target=_serve, args=(listener, unix_path), daemon=True).start()
    try:
        code = subprocess.call(argv)
    except OSError as exc:
        print(f"relay: cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
