"""Send one workload request with aiohttp the way the runner does, for end-to-end tests.

Stamps are ns from just before the request was sent (so first_token_ns is the TTFT).
The parser is fed once per transport read (`iter_any`) and finished for status < 400;
for status >= 400 the error body is kept in `error` with outcome http_error.
"""

from __future__ import annotations

import time

import aiohttp

from benchmaker.engine.records import Outcome, Sample


async def drive(workload, seq: int = 0, session: aiohttp.ClientSession | None = None) -> tuple[Sample, object]:
    """Return (sample, parser) for request `seq` of `workload`."""
    own = session is None
    session = session or aiohttp.ClientSession()
    spec = workload.request(seq)
    parser = workload.parser(spec)
    sample = Sample(run_id="test", seq=seq)
    try:
        t0 = time.perf_counter_ns()
        sample.sent_ns = 0
        async with session.request(spec.method, spec.url, headers=spec.headers, data=spec.body) as resp:
            sample.http_status = resp.status
            if resp.status >= 400:
                body = await resp.read()
                sample.outcome = Outcome.HTTP_ERROR.value
                sample.error = body.decode("utf-8", "replace")
                sample.end_ns = time.perf_counter_ns() - t0
                return sample, parser
            nbytes = 0
            async for data in resp.content.iter_any():
                t = time.perf_counter_ns() - t0
                if nbytes == 0:
                    sample.first_byte_ns = t
                nbytes += len(data)
                parser.feed(data, t, sample)
            sample.end_ns = time.perf_counter_ns() - t0
            sample.bytes_received = nbytes
        parser.finish(sample)
    except aiohttp.ClientError as exc:
        sample.outcome = Outcome.TRANSPORT_ERROR.value
        sample.error = repr(exc)
    finally:
        if own:
            await session.close()
    return sample, parser
