"""Custom hooks: sign every request with HMAC, parse a field out of every response.

    HOOKS_SECRET=... python examples/hooks.py http://127.0.0.1:8080/api/score \\
        [--field result.score] [--body '{"q": 1}'] [--requests 20] [--out-dir runs]

Needs: an HTTP API at URL that answers the POST with JSON holding `--field` (and, to
check the signature, verifies X-Signature with `signature()` below), and the signing
secret in $HOOKS_SECRET. The bundled scripted server answers OpenAI chat JSON and checks
no signature; with it name a field of that JSON:

    python -m benchmaker.testing.scenario_server --port 8000 &
    HOOKS_SECRET=s python examples/hooks.py http://127.0.0.1:8000/v1/chat/completions \\
        --field 'choices[0].message.content' --body '{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'

(with the default `--field result` every sample is `grading_error`: no `result` in that JSON).

Two hooks around an HttpWorkload (POST of a JSON body), both outside the timed span
(docs/metrics.md: `sent_ns` is stamped after the pre-request hooks; post-response hooks run
after `end_ns`):

- `HmacSigner` (pre-request hook): adds `X-Timestamp` (Unix seconds) and
  `X-Signature: sha256=<hex>`, the HMAC-SHA256 of `"{timestamp}\\n{METHOD}\\n{path}\\n"`
  followed by the body bytes, keyed with the secret (read from $HOOKS_SECRET; never
  written to the bundle, whose samples carry no request headers).
- `JsonFieldHook` (post-response hook): parses the response body as JSON and stores the
  value at a field path (`result.score`, `items[0].id`) in `sample.meta[meta_key]`, so
  it lands in samples.jsonl and the warehouse's `requests.meta`. A body that is not
  JSON or lacks the field makes the sample `grading_error` with the reason.

Use them from your own code the same way:

    BenchRunner(cfg, workload=HttpWorkload(url, "POST", body=..., keep_body=True),
                pre_hooks=[HmacSigner(secret)], post_hooks=[JsonFieldHook("result.score")])
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import Outcome, RequestSpec, Sample
from benchmaker.engine.runner import BenchRunner
from benchmaker.recipes.bench import load_of
from benchmaker.workloads.datasets import get_field, parse_field_path
from benchmaker.workloads.http import HttpWorkload

SECRET_ENV = "HOOKS_SECRET"
# said when no request succeeded (module docstring)
NEEDS = (
    "hooks.py: no request succeeded; it needs an API at {url} that answers with JSON holding "
    "--field {field} (the bundled scripted server, python -m benchmaker.testing.scenario_server, "
    "answers chat JSON: --field 'choices[0].message.content' with a chat --body)"
)


def signature(secret: bytes, timestamp: str, method: str, path: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 (RFC 2104, hashlib/hmac) of
    `"{timestamp}\\n{method}\\n{path}\\n" + body` keyed with `secret`. `path` includes
    the query string when there is one. A server verifies with the same function."""
    message = f"{timestamp}\n{method}\n{path}\n".encode() + body
    return "sha256=" + hmac.new(secret, message, hashlib.sha256).hexdigest()


class HmacSigner:
    """Pre-request hook: signs each RequestSpec in place (returns None, so the runner
    keeps the mutated spec). `clock` returns Unix seconds (default time.time)."""

    def __init__(self, secret: bytes | str, *, clock: Any = time.time) -> None:
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.clock = clock

    def __call__(self, spec: RequestSpec) -> None:
        parts = urlsplit(spec.url)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        timestamp = str(int(self.clock()))
        spec.headers["X-Timestamp"] = timestamp
        spec.headers["X-Signature"] = signature(self.secret, timestamp, spec.method, path, spec.body or b"")


class JsonFieldHook:
    """Post-response hook: `sample.meta[meta_key]` = the JSON value at `field` of the
    response body (needs the workload to keep bodies: HttpWorkload(keep_body=True)).
    Only `ok` samples are parsed; a body that is not JSON or lacks the field sets the
    outcome `grading_error` with `error` naming the field."""

    def __init__(self, field: str, meta_key: str | None = None) -> None:
        self.field = field
        self.parts = parse_field_path(field)
        self.meta_key = meta_key or field

    def __call__(self, spec: RequestSpec, sample: Sample, text: str) -> None:
        if sample.outcome != Outcome.OK.value:
            return
        try:
            value = get_field(json.loads(text), self.parts)
        except (ValueError, LookupError, TypeError) as exc:
            sample.outcome = Outcome.GRADING_ERROR.value
            sample.error = f"response: {self.field}: not found in the JSON body ({type(exc).__name__}: {exc})"
            return
        sample.meta = {**(sample.meta or {}), self.meta_key: value}


def run_signed(
    url: str,
    secret: str,
    *,
    field: str = "result",
    body: str = "{}",
    requests: int = 20,
    rate: str = "closed:1",
    out_dir: Path = Path("runs"),
):
    """POST `body` (JSON text) to `url` `requests` times with both hooks; returns the
    RunResult. Raises ValueError when `body` is not JSON."""
    workload = HttpWorkload(url, "POST", body=json.loads(body), keep_body=True)
    config = BenchConfig(load=rate, max_requests=requests, out_dir=out_dir, kind="http", label="example-hooks")
    runner = BenchRunner(config, workload=workload, pre_hooks=[HmacSigner(secret)], post_hooks=[JsonFieldHook(field)])
    return runner.run_sync()


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring); returns 0 valid, 1 invalid, 2 usage."""
    ap = argparse.ArgumentParser(prog="python examples/hooks.py", description=__doc__.split("\n")[0])
    ap.add_argument("url", nargs="?", help="URL to POST to, e.g. http://127.0.0.1:8080/api/score")
    ap.add_argument("--field", default="result", help="field path of the response JSON to keep (default result)")
    ap.add_argument("--body", default="{}", help="JSON request body (default {})")
    ap.add_argument("--requests", type=int, default=20, help="requests to send (default 20)")
    ap.add_argument("--concurrency", type=int, help="requests in flight, each sent as one ends (default 1)")
    ap.add_argument("--rate", help="open-loop arrivals instead of --concurrency: constant:R, poisson:R, ...")
    ap.add_argument("--out-dir", type=Path, default=Path("runs"), help="folder for run bundles (default runs)")
    args = ap.parse_args(argv)
    try:
        rate = load_of(args.rate, args.concurrency)  # the CLI's rule: one of the two, closed:1 without
    except ConfigError as exc:
        ap.error(str(exc))
    if args.url is None:
        ap.print_usage()
        return 2
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        print(f"hooks.py: set {SECRET_ENV} to the signing secret", file=sys.stderr)
        return 2
    result = run_signed(
        args.url, secret, field=args.field, body=args.body, requests=args.requests, rate=rate, out_dir=args.out_dir
    )
    run = result.summary["run"]
    print(
        f"run {result.run_id}: {run['n_ok']} ok of {run['n_samples']}; "
        f"{args.field} in samples.jsonl meta; bundle: {result.bundle_dir}"
    )
    if not run["n_ok"]:
        print(NEEDS.format(url=args.url, field=args.field), file=sys.stderr)
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
