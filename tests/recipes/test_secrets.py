"""No secret on disk: a run made with secrets in request headers (YAML values, one from
`${VAR}`), URL userinfo and query values, then loaded into the warehouse, reported and
exported, leaves none of them in any file it wrote nor in what it printed. Real
components: the instant server on 127.0.0.1, the CLI's entry point, a DuckDB file."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmaker.engine.bundle import REDACTED, redact, redact_headers, redact_url
from benchmaker.recipes.cli import main
from benchmaker.testing.instant_server import start_instant_server

SECRETS = {
    "userinfo-password": "S3CRET-PASS-1a",
    "userinfo-user": "ghp_S3CRETUSER2b",
    "query-api-key": "S3CRET-QUERY-3c",
    "query-other": "S3CRET-QUERY-4d",
    "api-key": "S3CRET-APIKEY-5e",
    "x-api-key": "S3CRET-XAPI-6f",
    "cookie": "S3CRET-COOKIE-7a",
    "subscription-key": "S3CRET-OCP-8b",
    "custom-from-env": "S3CRET-ENV-9c",
    "cli-header": "S3CRET-CLIHDR-0d",
}


def _files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file())


def test_a_run_with_secrets_everywhere_leaves_none_on_disk(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_SECRET", SECRETS["custom-from-env"])
    s = SECRETS
    with start_instant_server(sse_chunks=5) as srv:
        url = (
            f"http://alice:{s['userinfo-password']}@127.0.0.1:{srv.port}/v1/chat/completions"
            f"?api_key={s['query-api-key']}&auth={s['query-other']}"
        )
        inputs = tmp_path / "in"
        inputs.mkdir()
        (inputs / "run.yaml").write_text(
            f"load: closed:1\nmax_requests: 3\nout_dir: {tmp_path / 'runs'}\n"
            f"record_trace: {tmp_path / 'trace' / 'trace.jsonl'}\n"
            f'workload:\n  type: openai-chat\n  url: "{url}"\n  model: m\n  api_key: {s["api-key"]}\n'
            f'  headers:\n    X-Api-Key: {s["x-api-key"]}\n    Cookie: "session={s["cookie"]}"\n'
            f"    Ocp-Apim-Subscription-Key: {s['subscription-key']}\n    X-Custom: ${{MY_SECRET}}\n"
            "    Content-Type: application/json\n"
        )
        assert main(["run", str(inputs / "run.yaml")]) == 0
        http_url = f"http://{s['userinfo-user']}@127.0.0.1:{srv.port}/json?token={s['query-api-key']}"
        assert (
            main(
                [
                    "http",
                    "--url",
                    http_url,
                    "--header",
                    f"X-Auth: {s['cli-header']}",
                    "--header",
                    "Accept: application/json",
                    "--max-requests",
                    "2",
                    "--out-dir",
                    "runs",
                    "--record-trace",
                    "trace/http.jsonl",
                ]
            )
            == 0
        )
    run_ids = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(run_ids) == 2
    assert main(["load", *[str(tmp_path / "runs" / r) for r in run_ids], "--warehouse", "w.duckdb"]) == 0
    for r in run_ids:
        assert main(["report", r, "--warehouse", "w.duckdb", "-o", f"report-{r}.html"]) == 0
    assert main(["export", "--parquet", "pq", "--warehouse", "w.duckdb"]) == 0
    out, err = capsys.readouterr()

    written = [p for p in _files(tmp_path) if inputs not in p.parents]
    names = {p.relative_to(tmp_path).parts[0] for p in written}
    assert {"runs", "trace", "w.duckdb", "pq"} <= names and any(n.startswith("report-") for n in names)
    assert len([p for p in written if p.suffix == ".parquet"]) >= 3
    found = {(str(p.relative_to(tmp_path)), k) for p in written for k, v in s.items() if v.encode() in p.read_bytes()}
    found |= {("stdout/stderr", k) for k, v in s.items() if v in out + err}
    assert found == set()
    # the redacted values are there, as "***"
    trace = (tmp_path / "trace" / "trace.jsonl").read_text()
    assert '"url":"http://***@127.0.0.1:' in trace and "?api_key=***&auth=***" in trace
    assert '"X-Custom":"***"' in trace and '"Content-Type":"application/json"' in trace


def test_redact_keeps_only_safe_header_values() -> None:
    assert redact_headers(
        {
            "Content-Type": "application/json",
            "User-Agent": "ua/1",
            "X-Auth": "s",
            "Ocp-Apim-Subscription-Key": "k",
            "Cookie": "c",
            "X-Empty": "",
        }
    ) == {
        "Content-Type": "application/json",
        "User-Agent": "ua/1",
        "X-Auth": REDACTED,
        "Ocp-Apim-Subscription-Key": REDACTED,
        "Cookie": REDACTED,
        "X-Empty": "",
    }
    assert redact_headers(["Accept: text/event-stream", "X-Token: abc", "nocolon"]) == [
        "Accept: text/event-stream",
        "X-Token: ***",
        "nocolon",
    ]
    assert redact({"workload": {"headers": {"X-A": "1"}, "extra_headers": {"B": "2"}, "max_tokens": 5}}) == {
        "workload": {"headers": {"X-A": REDACTED}, "extra_headers": {"B": REDACTED}, "max_tokens": 5}
    }


@pytest.mark.parametrize(
    "url,expected",
    [
        ("http://u:p@h:80/x", "http://***@h:80/x"),
        ("http://ghp_TOKEN@h/x", "http://***@h/x"),
        ("s3://KEY:se/cr@et@bucket/k", "s3://***@bucket/k"),
        ("https://h/v1?api_key=a&auth=b&n=1#f", "https://h/v1?api_key=***&auth=***&n=***#f"),
        ("see http://u:p@h/?t=1 and https://x/y", "see http://***@h/?t=*** and https://x/y"),
        ("no url ?a=b", "no url ?a=b"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected
