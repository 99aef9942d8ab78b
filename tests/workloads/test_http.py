"""Plain HTTP workload: request building, expected-status judgement, body byte count."""

from __future__ import annotations

import socket

import orjson
import pytest
from aiohttp import web

from benchmaker.engine.records import Sample
from benchmaker.workloads.http import HttpParser, HttpWorkload
from tests.workloads._drive import drive


def test_dict_body_is_json_with_content_type():
    wl = HttpWorkload("http://h/x", "post", body={"q": 1})
    spec = wl.request(5)
    assert (spec.method, spec.body, spec.headers) == ("POST", b'{"q":1}', {"Content-Type": "application/json"})


def test_bad_expected_status_is_rejected():
    with pytest.raises(ValueError, match=r"expected_status: expected HTTP status codes 100..599 \(got 99\)"):
        HttpWorkload("http://h", expected_status=99)


def test_unexpected_2xx_becomes_http_error():
    p = HttpParser(frozenset({201}))
    s = Sample(run_id="t", seq=0, http_status=200)
    p.feed(b"abc", 1, s)
    p.feed(b"de", 2, s)
    p.finish(s)
    assert (s.outcome, s.error, s.bytes_received) == ("http_error", "status 200 not in expected (201)", 5)
    assert s.first_token_ns is None


@pytest.fixture
async def http_server():
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(status=201 if request.method == "POST" else 204 if body == b"none" else 200, body=body)

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/echo"
    await runner.cleanup()


async def test_e2e_expected_status_and_body_bytes(http_server):
    s, p = await drive(HttpWorkload(http_server, "POST", body={"k": "v"}, expected_status=(200, 201), keep_body=True))
    assert (s.outcome, s.http_status, s.bytes_received, p.text) == ("ok", 201, 9, '{"k":"v"}')
    s, _ = await drive(HttpWorkload(http_server, "PUT", body="none"))  # server answers 204
    assert (s.outcome, s.error) == ("http_error", "status 204 not in expected (200)")
    assert orjson.loads(HttpWorkload(http_server, body=[1]).request(0).body) == [1]
