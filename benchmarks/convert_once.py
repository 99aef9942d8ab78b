"""Command to first request of `benchmaker swebench-replay --logs` on a SWE-bench-sized
corpus, before/after converting the logs once per run.

    .venv/bin/python benchmarks/convert_once.py [--before REV] [--trajectories 500]
        [--min-turns 50] [--max-turns 450] [--seed 1] [--keep DIR]

Needs the real pi session ../shared/data/real/pi-session-v1-large.jsonl (exits 0 with
a note when it is absent). Builds the corpus as benchmarks/corpus.py does (500 pi
sessions of 50-450 turns, ~300 MB), starts one Prefect server on 127.0.0.1 (its own
PREFECT_HOME in the work directory, stopped at the end), and runs

    python -m benchmaker.recipes.cli swebench-replay --logs CORPUS --concurrency 1
        --episodes-per-point 1 --out-dir OUT --warehouse WH

with the code of git revision `--before` (`git archive`, default 2f350ae~1: the CLI
checks the logs with one conversion, the plan converts them again into a temporary
file and validates every trajectory back, the flow's task converts a third time) and
with this checkout (one conversion into the cache the task reads; the plan reads it
without validation), each in a fresh process, alternating which goes first: a first
run (empty cache) and a second run (same --out-dir) of each. Figures per run:

- to first request, s: from the command's start (wall clock, time.time) to the first
  model call the episode sent (the run's manifest t0_wall_ns + the smallest sent_ns of
  the point's samples.jsonl: benchmaker.engine.records.Sample times are ns from that t0);
- CLI CPU s to then: the command process's own user + system CPU (/proc/PID/stat,
  read every 20 ms; the last reading before the first request). The replay server's
  store load runs in its own process and is not in it (the same in both versions);
- command CPU s: the whole command with its children (RUSAGE_CHILDREN), for scale.

The wall figures include the neighbours' load on a shared machine; the CPU figures
and the before/after ratios of one run are the comparison.

    .venv/bin/python benchmarks/convert_once.py --per-point-read [--rounds 2]

times only a sweep point's read of the converted corpus, in this process: the
conversion written once (benchmaker.trajectories.convert.convert_paths), then per round, alternating
which goes first, the read a point did before (`list(read_trajectories(path))`) and the
one it does now (benchmaker.trajectories.convert.load_trajectories: the same validation, garbage
collection paused), each its process CPU s (time.process_time, after a gc.collect),
equal results checked; then benchmaker.tasks.sweep.point_trajectories twice, as the first and the
next point of a run (the next reuses the first's models). No Prefect server.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from corpus import REAL, build_logs  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    """utime + stime of process `pid` in s; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_prefect(home: Path) -> tuple[subprocess.Popen, str]:
    """A Prefect server on 127.0.0.1 with PREFECT_HOME `home`; (process, API URL) once
    /api/health answers. Raises RuntimeError when it does not within 180 s."""
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = (home / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited {proc.returncode}: see {home / 'server.log'}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"prefect server not healthy within 180 s: see {home / 'server.log'}")


def first_request_wall_s(out_dir: Path, before: set[Path]) -> float:
    """Wall time (s since the epoch) of the first model call of the run written under
    `out_dir` that is not in `before`."""
    (run_dir,) = [d for d in out_dir.iterdir() if d.is_dir() and d.name != "_cache" and d not in before]
    t0_wall_ns = orjson.loads((run_dir / "manifest.json").read_bytes())["t0_wall_ns"]
    sent = [orjson.loads(line).get("sent_ns") for line in (run_dir / "points" / "c1" / "samples.jsonl").open("rb")]
    return (t0_wall_ns + min(s for s in sent if s is not None)) / 1e9


def run_once(tree: Path, logs: Path, out_dir: Path, warehouse: Path, api_url: str) -> dict[str, float]:
    """One `swebench-replay` command with the code of `tree`; its figures (module doc)."""
    env = {
        **os.environ,
        "PREFECT_API_URL": api_url,
        "PYTHONPATH": str(tree),
        "BENCHMAKER_MAX_LOOP_LAG_MS": "100000",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    before = {d for d in out_dir.iterdir()} if out_dir.exists() else set()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmaker.recipes.cli",
            "swebench-replay",
            "--logs",
            str(logs),
            "--concurrency",
            "1",
            "--episodes-per-point",
            "1",
            "--out-dir",
            str(out_dir),
            "--warehouse",
            str(warehouse),
        ],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    readings: list[tuple[float, float]] = []  # (wall s, CPU s of the command process)

    def poll() -> None:
        while proc.poll() is None:
            cpu = _cpu_s(proc.pid)
            if cpu is not None:
                readings.append((time.time(), cpu))
            time.sleep(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    output = proc.communicate()[0].decode("utf-8", "replace")
    poller.join()
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{tree}: swebench-replay exited {proc.returncode}:\n{output[-3000:]}")
    first = first_request_wall_s(out_dir, before)
    cli_cpu = max((cpu for t, cpu in readings if t <= first), default=float("nan"))
    return {
        "to_first_request_s": first - start,
        "cli_cpu_s": cli_cpu,
        "command_cpu_s": (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime),
    }


def per_point_read(logs: Path, work: Path, rounds: int) -> None:
    """Print the CPU s of a sweep point's read of the conversion of `logs` before and
    after (module doc), best of `rounds`, and their ratio."""
    from benchmaker.tasks.sweep import point_trajectories
    from benchmaker.trajectories.convert import convert_paths, load_trajectories, read_trajectories

    out = work / "trajectories.jsonl"
    report = convert_paths([logs], out, progress=None)
    print(
        f"converted: {report.trajectories} trajectories, {report.turns:,} turns, "
        f"{out.stat().st_size / 1e6:,.0f} MB of trajectories.jsonl"
    )
    reads = {"before": lambda: list(read_trajectories(out)), "after": lambda: load_trajectories(out)}
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    for k in range(rounds):
        got = {}
        for name in ("before", "after") if k % 2 == 0 else ("after", "before"):
            gc.collect()
            c0 = time.process_time()
            got[name] = reads[name]()
            cpu[name].append(time.process_time() - c0)
        assert got["before"] == got["after"], "load_trajectories differs from read_trajectories"
        del got
        print(f"  round {k + 1}: before {cpu['before'][-1]:5.2f} CPU s, after {cpu['after'][-1]:5.2f} CPU s")
    b, a = min(cpu["before"]), min(cpu["after"])
    print(
        f"per-point read of {report.turns:,} turns: before {b:.2f} CPU s, after {a:.2f} CPU s "
        f"({b / a:.1f}x less CPU; best of {rounds})"
    )
    gc.collect()
    points = []
    for _ in range(2):
        c0 = time.process_time()
        point_trajectories(out)
        points.append(time.process_time() - c0)
    print(
        f"benchmaker.tasks.sweep.point_trajectories: first point {points[0]:.2f} CPU s, next point {points[1]:.3f} CPU s "
        f"(was {b:.2f} CPU s at every point)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="2f350ae~1", help="git revision of the code before (default 2f350ae~1)")
    ap.add_argument("--trajectories", type=int, default=500)
    ap.add_argument("--min-turns", type=int, default=50)
    ap.add_argument("--max-turns", type=int, default=450)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None, help="work directory kept (default: a temp dir, removed)")
    ap.add_argument(
        "--per-point-read",
        action="store_true",
        help="time only a sweep point's read of the converted corpus, before/after (module doc)",
    )
    ap.add_argument("--rounds", type=int, default=2, help="rounds of --per-point-read (default 2)")
    args = ap.parse_args()
    if not REAL.exists():
        print(f"{REAL} is absent: nothing to build the corpus from (skipped)")
        return 0
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="bench-convert-once-")
    work = args.keep or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        logs = work / "logs"
        log_bytes, n_turns = build_logs(REAL, logs, args.trajectories, args.min_turns, args.max_turns, args.seed)
        print(f"corpus: {args.trajectories} pi sessions, {n_turns:,} turns, {log_bytes / 1e6:,.1f} MB of logs")
        if args.per_point_read:
            per_point_read(logs, work, args.rounds)
            return 0
        old_tree = work / "before"
        old_tree.mkdir(exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.before], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
        home = work / "prefect-home"
        home.mkdir(exist_ok=True)
        server, api_url = start_prefect(home)
        trees = {"before": old_tree, "after": REPO}
        figures: dict[tuple[str, str], dict[str, float]] = {}
        order = [("before", "first"), ("after", "first"), ("after", "second"), ("before", "second")]
        for name, which in order:
            out = work / f"out-{name}"
            figures[(name, which)] = f = run_once(trees[name], logs, out, work / f"wh-{name}.duckdb", api_url)
            print(
                f"  {name:<6} {which} run: {f['to_first_request_s']:6.1f} s to the first request, "
                f"CLI CPU {f['cli_cpu_s']:6.1f} s to then, command CPU {f['command_cpu_s']:6.1f} s",
                flush=True,
            )
        print(
            f"\ncommand -> first request, {args.trajectories}-session corpus ({log_bytes / 1e6:,.0f} MB), "
            f"before = {args.before}, after = this checkout"
        )
        print(f"{'run':<8}{'before s':>10}{'after s':>10}{'ratio':>8}{'CPU before':>12}{'CPU after':>11}{'ratio':>8}")
        for which in ("first", "second"):
            b, a = figures[("before", which)], figures[("after", which)]
            print(
                f"{which:<8}{b['to_first_request_s']:>10.1f}{a['to_first_request_s']:>10.1f}"
                f"{b['to_first_request_s'] / a['to_first_request_s']:>7.2f}x"
                f"{b['cli_cpu_s']:>12.1f}{a['cli_cpu_s']:>11.1f}{b['cli_cpu_s'] / a['cli_cpu_s']:>7.2f}x"
            )
        print(
            "(CPU: the CLI process's own user + system s up to the first request; wall s include the "
            "replay server's store load and Prefect's work, the same in both)"
        )
        return 0
    finally:
        if server is not None:  # its own process group (start_new_session): the server and its workers
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        if tmp is not None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
