"""The two clients of the conformance comparison, run on one server with one
dataset file: `benchmaker run` (our engine, through the CLI) and `vllm bench serve`
(vLLM's own benchmark client, from the vLLM venv).

    prompts = write_prompts(work / "prompts.jsonl", n=60)
    ours = run_ours(base_url, prompts, n=60, concurrency=4, output_len=32, work=work)
    peer = run_vllm_bench(base_url, prompts, n=60, concurrency=4, output_len=32, work=work,
                          tokenizer=model_dir)
    ours.metrics["ttft_p50_ms"], peer.metrics["ttft_p50_ms"]

Both clients: the same prompts in file order (vLLM: `--dataset-name custom
--disable-shuffle --skip-chat-template`, so each line's `prompt` is sent as the user
message unchanged), the same request count, closed loop at the same concurrency (ours
`closed:C` with `max_requests`; vLLM `--request-rate inf --max-concurrency C`), the same
output length with `ignore_eos` (ours `max_tokens` + the `ignore_eos` key; vLLM
`--custom-output-len` + `--ignore-eos`), streaming with usage. vLLM's initial test request
is skipped (`--ready-check-timeout-sec 0`) so both send exactly `n` requests.

Metric keys of `ClientRun.metrics` (ms unless named; None when the client has no value):
`request_throughput_per_s`, `{ttft,tpot,itl,e2e}_{p50,p99}_ms`, `n_ok`, and for ours
`verdict` ("valid" or the run's invalid reasons). Ours come from
summary.json (ttft_ms, tpot_ms, itl_event_ms, e2e_ms; linear percentiles), vLLM's from its
result JSON (median_*/p99_* of ttft, tpot, itl, e2el; numpy percentiles, linear). The
definitions differ where docs/conformance.md says; vLLM's
(vllm/benchmarks/lib/endpoint_request_func.py, serve.py `calculate_metrics`, 0.32.0):
TTFT = first SSE chunk with non-empty `choices` (the role-only chunk counts), ITL = gaps
between successive chunks with `choices` (the finish chunk counts), latency = last such
chunk (the usage chunk and [DONE] do not count), TPOT = (latency - TTFT) / (output - 1),
request throughput = completed / (benchmark end - benchmark start).

`cpu_s` is the client's CPU time (user + system of the child process, from `os.wait4`),
`wall_s` its wall time (process start to exit, imports included).

`run_paired` runs both at once (the test gives each half the concurrency of the
alternated runs), so that both measure the server under the same load at the same
moments: on a shared host the load moves more between two alternated runs than the
clients differ.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.venvs import REPO, venv_bin

__all__ = [
    "API_PATHS",
    "BENCHMAKER",
    "ClientRun",
    "check_session_log",
    "flush_recorder",
    "record_agent",
    "pooled_itl_ms",
    "reset_prefix_cache",
    "run_agent",
    "run_ours",
    "run_paired",
    "run_vllm_bench",
    "url_process",
    "vllm_definitions",
    "vllm_means",
    "write_prompts",
]

# our CLI: the console script beside the interpreter running the tests (the project's
# .venv under make conformance; its PYTHONPATH, when set, goes with it)
BENCHMAKER = str(Path(sys.executable).with_name("benchmaker"))
API_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}

_WORDS = (
    "cache token server request stream latency model prompt queue batch decode prefill "
    "kernel thread memory block page schedule worker client socket buffer bytes chunk event "
    "metric window sample rate burst load trace replay agent tool task patch test verify"
).split()


@dataclass
class ClientRun:
    """One client run: `metrics` (module docstring), `cpu_s`, `wall_s`, `out` (the bundle
    folder or vLLM's result file), `raw` (summary.json or vLLM's result dict)."""

    client: str
    metrics: dict[str, float | None]
    cpu_s: float
    wall_s: float
    out: Path
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


def write_prompts(path: Path, n: int, *, seed: int = 0, words: tuple[int, int] = (24, 72)) -> Path:
    """Write `n` JSONL lines {"prompt": TEXT}, TEXT a seeded run of `words[0]..words[1]`
    words from a fixed list; returns `path`. Same seed, same file."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(*words)))
            f.write(json.dumps({"prompt": f"request {i}: {text}"}) + "\n")
    return path


def reset_prefix_cache(base_url: str) -> None:
    """POST <base_url>/reset_prefix_cache (vLLM, VLLM_SERVER_DEV_MODE=1): every run starts
    with an empty prefix cache. Raises urllib.error.HTTPError when refused."""
    req = urllib.request.Request(base_url + "/reset_prefix_cache", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30):
        pass


def _run(
    argv: list[str],
    log: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    ok_codes: tuple[int, ...] = (0,),
    ready: tuple[str, threading.Event] | None = None,
) -> tuple[float, float]:
    """Run argv with output to `log`; returns (cpu_s, wall_s): the child's own user +
    system CPU (os.wait4, so runs in parallel threads do not mix) and its wall time.
    `ready` = (text, event): the event is set once `text` appears in the log (and always
    when the process ends). Raises RuntimeError with the log tail on an exit code not in
    `ok_codes` or after `timeout_s` (the process is killed)."""
    t0 = time.perf_counter()
    try:
        with open(log, "wb") as f:
            proc = subprocess.Popen(
                argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=REPO
            )
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if ready and not ready[1].is_set() and ready[0] in log.read_text(errors="replace"):
                ready[1].set()
            if time.perf_counter() - t0 > timeout_s:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{argv[0]} still running after {timeout_s:g} s (log {log})")
            time.sleep(0.05)
    finally:
        if ready:
            ready[1].set()
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    wall, cpu = time.perf_counter() - t0, usage.ru_utime + usage.ru_stime
    if code not in ok_codes:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{argv[0]} exited with code {code} (log {log}):\n{tail}")
    return cpu, wall


def ours_run_file(
    path: Path,
    *,
    chat_url: str,
    prompts: Path,
    n: int,
    concurrency: int,
    output_len: int,
    model: str,
    label: str,
    metrics_url: str | None = None,
    api: str = "chat",
) -> Path:
    """Write the YAML run file of our client (module docstring); returns `path`.
    `chat_url` is the endpoint of `api` (chat, responses or messages); a Responses
    request also sends `"store": false`, as vLLM's `openai-responses` client does."""
    lines = [
        f"load: closed:{concurrency}",
        f"max_requests: {n}",
        f"label: {label}",
        "timeouts: {ttft_s: 120, idle_s: 60, total_s: 300}",
    ]
    if metrics_url:
        lines += ["monitors:", f"  - {{type: prometheus, url: '{metrics_url}', interval_s: 1s, metrics: ['vllm:*']}}"]
    lines += [
        "workload:",
        "  type: openai-chat",
        f"  api: {api}",
        f"  url: '{chat_url}'",
        f"  model: {model}",
        f"  max_tokens: {output_len}",
        "  ignore_eos: true",
        f"  dataset: {{type: jsonl, path: '{prompts}', field: prompt}}",
    ]
    if api == "responses":
        lines.append("  extra_body: {store: false}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _pct(stats: dict[str, Any] | None, key: str) -> float | None:
    return None if not stats or stats.get("count", 0) == 0 else stats.get(key)


def run_ours(
    base_url: str,
    prompts: Path,
    *,
    n: int,
    concurrency: int,
    output_len: int,
    work: Path,
    model: str = "tiny",
    label: str = "conformance",
    metrics: bool = False,
    timeout_s: float = 900,
    api: str = "chat",
) -> ClientRun:
    """`benchmaker run` of a run file (ours_run_file) against `<base_url>` + API_PATHS[api]
    (chat by default), with a Prometheus monitor on `<base_url>/metrics` when `metrics`.
    Besides the module docstring's keys, `metrics` has the means `{ttft,tpot,itl,e2e}_mean_ms`
    (itl: per token-bearing event, as vLLM's client counts it) and `itl_pooled_ms`
    (pooled_itl_ms, from samples.jsonl). An invalid run (exit 1,
    e.g. event-loop lag on a busy host) is returned with its reasons in
    `metrics["verdict"]` (else "valid"). Raises RuntimeError when the CLI fails otherwise."""
    work.mkdir(parents=True, exist_ok=True)
    tag = f"{label}-{time.time_ns()}"
    cfg = ours_run_file(
        work / f"{tag}.yaml",
        chat_url=base_url + API_PATHS[api],
        prompts=prompts,
        n=n,
        concurrency=concurrency,
        output_len=output_len,
        model=model,
        label=label,
        metrics_url=base_url + "/metrics" if metrics else None,
        api=api,
    )
    out_dir = work / "runs"
    before = set(out_dir.iterdir()) if out_dir.exists() else set()
    cpu, wall = _run(
        [BENCHMAKER, "run", str(cfg), "--out-dir", str(out_dir), "--no-progress"],
        work / f"{tag}.log",
        timeout_s,
        ok_codes=(0, 1),
    )
    bundle = next(iter(sorted(set(out_dir.iterdir()) - before)))
    summary = json.loads((bundle / "summary.json").read_text())
    run = summary["run"]
    m: dict[str, Any] = {
        "request_throughput_per_s": run["request_throughput_per_s"],
        "n_ok": run["n_ok"],
        "verdict": "valid" if summary["verdict"]["valid"] else "; ".join(summary["verdict"]["reasons"]),
    }
    for ours_key, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_event_ms", "itl"), ("e2e_ms", "e2e")):
        m[f"{key}_p50_ms"] = _pct(run.get(ours_key), "p50")
        m[f"{key}_p99_ms"] = _pct(run.get(ours_key), "p99")
        m[f"{key}_mean_ms"] = _pct(run.get(ours_key), "mean")
    spans = [
        ((r["token_event_ns"][-1] - r["token_event_ns"][0]) / 1e6, r["output_tokens"] - 1)
        for r in map(json.loads, (bundle / "samples.jsonl").read_text().splitlines())
        if r["outcome"] == "ok" and r["token_event_ns"] and (r["output_tokens"] or 0) > 1
    ]
    m["itl_pooled_ms"] = pooled_itl_ms(spans)
    return ClientRun("benchmaker", m, cpu, wall, bundle, summary)


def pooled_itl_ms(spans: list[tuple[float, int]]) -> float | None:
    """Inter-token latency pooled per token, in ms: the sum of (last token - first token)
    over requests / the sum of their tokens after the first, as vLLM's
    `vllm:inter_token_latency_seconds` pools its decode steps (one token each); None
    without such a request."""
    steps = sum(n for _, n in spans)
    return sum(ms for ms, _ in spans) / steps if steps else None


def run_vllm_bench(
    base_url: str,
    prompts: Path,
    *,
    n: int,
    concurrency: int,
    output_len: int,
    work: Path,
    tokenizer: Path,
    model: str = "tiny",
    timeout_s: float = 900,
    started: threading.Event | None = None,
    api: str = "chat",
) -> ClientRun:
    """`vllm bench serve --backend openai-chat` (module docstring) with `--save-result
    --save-detailed`; the tokenizer folder is only used to count prompt lengths. `started`
    is set when it starts sending (it prints "Maximum request concurrency" just before).
    `api` "responses": `--backend openai-responses` on /v1/responses (vLLM's client
    reads that stream as ours does: TTFT at the first `response.output_text.delta`, ITL
    between such deltas, latency at the last one; usage from `response.completed`).
    Besides the module docstring's keys, `metrics` has the means
    `{ttft,tpot,itl,e2e}_mean_ms` of its per-request figures (tpot as serve.py computes
    it, over requests of more than one token) and `itl_pooled_ms` (pooled_itl_ms: its ITL gaps
    of each request summed, over the tokens after the first). Raises RuntimeError when it fails."""
    work.mkdir(parents=True, exist_ok=True)
    name = f"vllm-bench-{time.time_ns()}.json"
    argv = [
        str(venv_bin("vllm", "vllm")),
        "bench",
        "serve",
        "--backend",
        "openai-responses" if api == "responses" else "openai-chat",
        "--base-url",
        base_url,
        "--endpoint",
        API_PATHS[api],
        "--model",
        model,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(prompts),
        "--disable-shuffle",
        "--skip-chat-template",
        "--custom-output-len",
        str(output_len),
        "--ignore-eos",
        "--num-prompts",
        str(n),
        "--request-rate",
        "inf",
        "--max-concurrency",
        str(concurrency),
        "--ready-check-timeout-sec",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(work),
        "--result-filename",
        name,
    ]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    ready = ("Maximum request concurrency", started) if started is not None else None
    cpu, wall = _run(argv, work / (name[:-5] + ".log"), timeout_s, env, ready=ready)
    res = json.loads((work / name).read_text())
    m: dict[str, float | None] = {
        "request_throughput_per_s": res.get("request_throughput"),
        "n_ok": res.get("completed"),
    }
    for key, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el")):
        m[f"{key}_p50_ms"] = res.get(f"p50_{theirs}_ms", res.get(f"median_{theirs}_ms"))
        m[f"{key}_p99_ms"] = res.get(f"p99_{theirs}_ms")
    m.update(vllm_means(res))
    return ClientRun("vllm bench serve", m, cpu, wall, work / name, res)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def vllm_means(res: dict[str, Any]) -> dict[str, float | None]:
    """Means in ms of `vllm bench serve`'s per-request lists (--save-detailed: ttfts,
    itls, latencies, output_lens; seconds), successful requests only (ttft > 0), TPOT as
    serve.py calculate_metrics: (latency - ttft) / (output_len - 1) for output_len > 1."""
    ok = [i for i, t in enumerate(res["ttfts"]) if t and t > 0]
    lat, ttft = res["latencies"], res["ttfts"]
    out = dict(zip(ok, res["output_lens"], strict=True))  # output_lens: successful requests only, in order
    return {
        "ttft_mean_ms": _mean([ttft[i] * 1000 for i in ok]),
        "tpot_mean_ms": _mean([(lat[i] - ttft[i]) * 1000 / (out[i] - 1) for i in ok if out[i] > 1]),
        "itl_mean_ms": _mean([g * 1000 for i in ok for g in res["itls"][i]]),
        "e2e_mean_ms": _mean([lat[i] * 1000 for i in ok]),
        "itl_pooled_ms": pooled_itl_ms([(sum(res["itls"][i]) * 1000, out[i] - 1) for i in ok if out[i] > 1]),
    }


@contextlib.contextmanager
def url_process(argv: list[str], *, log: Path, timeout_s: float = 60.0) -> Iterator[str]:
    """Start a server process that prints its base URL as the first line of its stdout
    (scenario_server, serve-replay, record, scripted_model), yield that URL, and SIGTERM its
    process group on exit (SIGKILL after 10 s). Its stderr and the rest of its stdout go
    to `log`, the URL line without its path: `benchmaker record`'s path is the proxy's
    secret, which stays out of files. Raises RuntimeError with the log tail when it exits
    or prints no URL within `timeout_s`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO
        )
        first: list[bytes] = []
        got_first = threading.Event()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not got_first.is_set():
                    first.append(line)
                    got_first.set()
                    m = re.match(rb"(http://[^/\s]+)/\S+", line)
                    line = m.group(1) + b"/<path not logged>\n" if m else line
                out.write(line)
                out.flush()
            got_first.set()

        pumping = threading.Thread(target=pump, daemon=True)
        pumping.start()
        try:
            got_first.wait(timeout_s)
            url = first[0].decode(errors="replace").strip() if first else ""
            if not re.fullmatch(r"http://127\.0\.0\.1:\d+(/\S*)?", url):
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise RuntimeError(f"{argv[0]} gave no URL (exit {proc.poll()}):\n{tail}")
            yield url
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            pumping.join(10)
            if proc.stdout is not None:
                proc.stdout.close()


def run_paired(
    base_url: str,
    prompts: Path,
    *,
    n: int,
    concurrency: int,
    output_len: int,
    work: Path,
    tokenizer: Path,
    model: str = "tiny",
    timeout_s: float = 900,
) -> tuple[ClientRun, ClientRun]:
    """Both clients at the same time on one server, each with `concurrency` in flight: vLLM's
    client is started first (its imports take 10-30 s) and ours when vLLM's starts sending;
    returns (ours, vLLM's). Raises RuntimeError when either fails."""
    started = threading.Event()
    theirs: list[ClientRun] = []
    errors: list[BaseException] = []

    def peer() -> None:
        try:
            theirs.append(
                run_vllm_bench(
                    base_url,
                    prompts,
                    n=n,
                    concurrency=concurrency,
                    output_len=output_len,
                    work=work,
                    tokenizer=tokenizer,
                    model=model,
                    timeout_s=timeout_s,
                    started=started,
                )
            )
        except BaseException as exc:  # re-raised in the caller's thread below
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=peer, name="vllm-bench")
    thread.start()
    try:
        started.wait(timeout_s)
        ours = run_ours(
            base_url,
            prompts,
            n=n,
            concurrency=concurrency,
            output_len=output_len,
            work=work,
            model=model,
            label="conformance-paired",
            timeout_s=timeout_s,
        )
    finally:
        thread.join()
    if errors:
        raise RuntimeError(f"vllm bench serve failed: {errors[0]}") from errors[0]
    return ours, theirs[0]


def _linear_pct(values: list[float], q: float) -> float | None:
    """Percentile `q` (0..100) by linear interpolation between closest ranks (numpy's and
    DuckDB quantile_cont's default); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def vllm_definitions(samples: Path) -> dict[str, float | None]:
    """vLLM's client definitions (module docstring) applied to our own samples.jsonl, for
    the successful requests: `ttft_p50_ms` = first body byte - sent (vLLM's first chunk
    with `choices`: the role chunk, which is the first bytes of a vLLM stream),
    `tpot_p50_ms` = (last token event - first byte) / (output_tokens - 1) for
    output_tokens >= 2, `e2e_p50_ms` = last token event - sent (vLLM's latency stops at
    its last chunk with `choices`; on vLLM the last token comes with finish_reason)."""
    ttft, tpot, e2e = [], [], []
    for line in samples.read_text().splitlines():
        r = json.loads(line)
        if r["outcome"] != "ok" or r["first_byte_ns"] is None or not r["token_event_ns"]:
            continue
        last = r["token_event_ns"][-1]
        ttft.append((r["first_byte_ns"] - r["sent_ns"]) / 1e6)
        e2e.append((last - r["sent_ns"]) / 1e6)
        if (r["output_tokens"] or 0) >= 2:
            tpot.append((last - r["first_byte_ns"]) / 1e6 / (r["output_tokens"] - 1))
    return {
        "ttft_p50_ms": _linear_pct(ttft, 50),
        "tpot_p50_ms": _linear_pct(tpot, 50),
        "e2e_p50_ms": _linear_pct(e2e, 50),
    }


def run_agent(argv: list[str], *, cwd: Path, log: Path, timeout_s: float = 600.0) -> subprocess.CompletedProcess:
    """Run an agent launcher to its end in `cwd`, its stdout and stderr written to `log`.
    Raises AssertionError with their tails when it exits non-zero."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def flush_recorder(url: str) -> dict[str, Any]:
    """POST `<url>/flush` to a `benchmaker record` server; its JSON answer (path,
    trajectories, turns, skipped)."""
    with urllib.request.urlopen(urllib.request.Request(url + "/flush", data=b"", method="POST")) as r:
        return json.load(r)


def record_agent(
    argv: list[str], *, task: Path, script: Path, tmp: Path, out_dir: Path, name: str, model: str = "fake-model"
) -> tuple[dict[str, Any], Path, Path]:
    """Copy the task folder `task` to `<tmp>/work` and run the agent launcher `argv` +
    `--base-url <recorder>/v1` there, through `benchmaker record -o <tmp>/recorded.jsonl`
    in front of the scripted model (conformance/scripted_model.py playing `script` as
    `model`); each process's output goes to `<out_dir>/<name>-{scripted-model,record,
    agent}.log`. Returns (the recorder's /flush answer, the trajectories file, the
    workdir). Raises AssertionError when the agent exits non-zero (run_agent)."""
    rec, workdir = tmp / "recorded.jsonl", tmp / "work"
    shutil.copytree(task, workdir)
    scripted = [sys.executable, str(REPO / "conformance" / "scripted_model.py"), "--script", str(script)]
    with (
        url_process([*scripted, "--model", model], log=out_dir / f"{name}-scripted-model.log") as model_url,
        url_process(
            [BENCHMAKER, "record", "--upstream", model_url, "-o", str(rec)], log=out_dir / f"{name}-record.log"
        ) as rec_url,
    ):
        run_agent([*argv, "--base-url", rec_url + "/v1"], cwd=workdir, log=out_dir / f"{name}-agent.log")
        return flush_recorder(rec_url), rec, workdir


def check_session_log(log: Path, rec: Path, workdir: Path, *, fmt: str, script: Path) -> tuple[Any, Any]:
    """Assert what a recording run of the scripted task (examples/mswea-task) left: the
    task's tests pass in `workdir`; the agent's own session log `log` converts (format
    `fmt`) to one trajectory with the match key of the one recorded in `rec`; the
    recorded responses are the script's thoughts; and turn by turn the conversion has
    the recorded content, tool calls (name, parsed arguments: APIs that send arguments as
    an object let each side write its own JSON text) and observation texts. Returns
    (converted, recorded) Trajectory objects."""
    from benchmaker.replay_server.store import load_trajectories
    from benchmaker.trajectories.convert import iter_trajectories

    verdict = subprocess.run([sys.executable, "run_tests.py"], cwd=workdir, capture_output=True, text=True)
    assert verdict.stdout.splitlines()[-1] == "passed 3 failed 0", verdict.stdout[-2000:]
    (converted,) = list(iter_trajectories(log))
    (recorded,) = [t for _, t in load_trajectories(rec)]
    assert (converted.source.format, converted.match_key) == (fmt, recorded.match_key)
    steps = json.loads(script.read_text())
    assert [t.response.content for t in recorded.turns] == [s["thought"] for s in steps]
    assert len(converted.turns) == len(recorded.turns)
    for c, r in zip(converted.turns, recorded.turns, strict=True):
        assert c.response.content == r.response.content
        assert [(tc.name, json.loads(tc.arguments_raw)) for tc in c.response.tool_calls] == [
            (tc.name, json.loads(tc.arguments_raw)) for tc in r.response.tool_calls
        ]
        assert [o.content for o in c.observations] == [o.content for o in r.observations]
    return converted, recorded
