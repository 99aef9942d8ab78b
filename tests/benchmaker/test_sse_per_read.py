"""SSEParser's one-event-per-read path: a read that is exactly one
`data: X` event gives the same events as the line loop would, and any other read
(event type, several data lines, CR, no space, a pending partial line) is not taken
for one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.benchmaker.test_sse import _feed_all as _feed


def _bytewise(stream: bytes) -> list[tuple[str | None, bytes]]:
    # 1-byte reads never take the one-event path: the line loop's answer
    return _feed([stream[i : i + 1] for i in range(len(stream))])


def test_one_event_per_read():
    reads = [b'data: {"a": 1}\n\n', b"data: x: y\n\n", b"data: \n\n", b"data: [DONE]\n\n"]
    assert _feed(reads) == [(None, b'{"a": 1}'), (None, b"x: y"), (None, b""), (None, b"[DONE]")]


def test_reads_that_are_not_one_plain_event():
    cases = [
        [b"event: update\n", b"data: a\n\n"],  # the type set by an earlier read is kept
        [b"data: a\n", b"data: b\n\n"],  # a data line pending from an earlier read
        [b"dat", b"a: a\n\n"],  # a partial line pending
        [b"data: a\r\n", b"\r\n"],  # CRLF split across reads
        [b"data: a\r\n\r\n"],  # CR line ends
        [b"data:a\n\n"],  # no space after the colon
        [b"data: a\ndata: b\n\n"],  # two data lines
        [b"data: a\n\ndata: b\n\n"],  # two events
        [b"\xef\xbb\xbfdata: a\n\n"],  # a BOM on the first read
        [b": keep-alive\n\n", b"data: a\n\n"],
    ]
    expected = [
        [("update", b"a")],
        [(None, b"a\nb")],
        [(None, b"a")],
        [(None, b"a")],
        [(None, b"a")],
        [(None, b"a")],
        [(None, b"a\nb")],
        [(None, b"a"), (None, b"b")],
        [(None, b"a")],
        [(None, b"a")],
    ]
    for reads, want in zip(cases, expected, strict=False):
        assert _feed(reads) == want == _bytewise(b"".join(reads)), reads


_VALUE = st.text(st.characters(exclude_characters="\r\n", exclude_categories=("Cs",)), max_size=10).map(str.encode)
_EVENT = st.tuples(
    st.none() | st.just("update"),
    st.lists(_VALUE, min_size=1, max_size=2),
    st.sampled_from([b"\n", b"\r\n"]),
    st.sampled_from([b"data: ", b"data:"]),
)


@settings(max_examples=300, deadline=None, database=None)
@given(events=st.lists(_EVENT, min_size=1, max_size=8))
def test_reads_cut_at_event_boundaries_match_the_line_loop(events):
    reads = []
    for kind, values, eol, prefix in events:
        head = b"event: " + kind.encode() + eol if kind else b""
        reads.append(head + b"".join(prefix + v + eol for v in values) + eol)
    assert _feed(reads) == _bytewise(b"".join(reads))
