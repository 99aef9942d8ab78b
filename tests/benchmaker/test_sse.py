"""SSE framing: WHATWG event-stream rules over bytes, fed in arbitrary splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmaker.engine.sse import SSEParser


def _feed_all(reads: list[bytes]) -> list[tuple[str | None, bytes]]:
    p = SSEParser()
    out = []
    for r in reads:
        out.extend(p.feed(r))
    assert p.close() is None
    return out


STREAM = (
    b'data: {"a": "x\xe2\x80\xa8y"}\n\n'  # U+2028 inside a JSON string
    b"event: update\n"
    b"data: line1\n"
    b"data: line2\n\n"
    b": keep-alive\n\n"
    b"data:no-space\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    (None, '{"a": "x\u2028y"}'.encode()),
    ("update", b"line1\nline2"),
    (None, b"no-space"),
    (None, b"[DONE]"),
]


def test_u2028_inside_data_line_is_not_a_line_end():
    # str.splitlines() would cut this line in two at U+2028 (httpx-sse #34).
    events = _feed_all([b'data: {"t": "a\xe2\x80\xa8b\xc2\x85c"}\n\n'])
    assert events == [(None, '{"t": "a\u2028b\u0085c"}'.encode())]


def test_whole_stream_in_one_read():
    assert _feed_all([STREAM]) == EXPECTED


def test_every_split_point_gives_the_same_events():
    # Two reads split at every byte offset: inside JSON strings, inside the 3-byte
    # UTF-8 sequence of U+2028, between "\n" and "\n".
    for cut in range(len(STREAM) + 1):
        assert _feed_all([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_byte_by_byte_feed():
    assert _feed_all([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@pytest.mark.parametrize("eol", [b"\r\n", b"\r", b"\n"])
def test_line_ends_crlf_cr_lf_are_equivalent(eol):
    stream = STREAM.replace(b"\n", eol)
    assert _feed_all([stream]) == EXPECTED
    for cut in range(len(stream) + 1):
        assert _feed_all([stream[:cut], stream[cut:]]) == EXPECTED, (eol, cut)


def test_crlf_split_across_reads_is_one_line_end():
    # If the LF after a read-final CR were an empty line, "a" and "b" would be two events.
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\ndata: b\r\n\r\n") == [(None, b"a\nb")]


def test_several_events_per_read_in_order():
    p = SSEParser()
    assert p.feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4") == [(None, b"1"), (None, b"2"), (None, b"3")]
    assert p.feed(b"\n\n") == [(None, b"4")]


def test_event_without_data_is_not_dispatched_and_type_resets():
    p = SSEParser()
    assert p.feed(b"event: ping\n\ndata: x\n\n") == [(None, b"x")]


def test_empty_data_field_dispatches_empty_string():
    # WHATWG: "data:" appends "" + LF, so the buffer is not empty and the event fires.
    assert _feed_all([b"data:\n\n"]) == [(None, b"")]


def test_id_retry_and_unknown_fields():
    p = SSEParser()
    assert p.feed(b"id: 42\nretry: 1500\nfoo: bar\ndata: x\n\nretry: 1x\nid: a\x00b\n\n") == [(None, b"x")]
    assert p.last_event_id == "42"  # the id with NUL is ignored
    assert p.retry_ms == 1500  # "1x" is not all digits


def test_leading_bom_is_skipped_even_when_split():
    assert _feed_all([b"\xef\xbb", b"\xbfdata: x\n\n"]) == [(None, b"x")]


def test_close_returns_an_event_cut_before_its_blank_line():
    p = SSEParser()
    assert p.feed(b"data: [DONE]") == []
    assert p.close() == b"[DONE]"
    p = SSEParser()
    assert p.feed(b'data: {"x": 1}\n\ndata: {"y"') == [(None, b'{"x": 1}')]
    assert p.close() == b'{"y"'


# -- random streams, line ends and splits (hypothesis) ----------------------------------------------

# data values: any text without CR/LF (NUL, U+2028, U+0085, form feed and astral
# characters included), as UTF-8
_VALUE = st.text(st.characters(exclude_characters="\r\n", exclude_categories=("Cs",)), max_size=12).map(
    lambda t: t.encode()
)
_EVENT = st.tuples(
    st.none() | st.sampled_from(["update", "error"]),  # event type
    st.lists(_VALUE, min_size=1, max_size=3),  # its data lines
    st.booleans(),  # a keep-alive comment before it
)
_EOL = st.sampled_from([b"\n", b"\r", b"\r\n"])


@settings(max_examples=300, deadline=None, database=None)
@given(events=st.lists(_EVENT, max_size=6), eols=st.lists(_EOL, min_size=1), data=st.data())
def test_random_events_with_mixed_line_ends_and_random_splits_give_the_same_events(events, eols, data):
    lines: list[bytes] = []
    for kind, values, comment in events:
        lines += [b": keep-alive"] if comment else []
        lines += ([b"event: " + kind.encode()] if kind else []) + [b"data: " + v for v in values] + [b""]
    # each line ends with the next line end of `eols` (cycled): CR, LF and CRLF mixed,
    # except that an empty line after a CR ends with CR (CR then LF is one CRLF)
    parts, prev = [], b""
    for i, line in enumerate(lines):
        eol = eols[i % len(eols)]
        if prev == b"\r" and eol == b"\n" and not line:
            eol = b"\r"
        parts.append(line + eol)
        prev = eol
    stream = b"".join(parts)
    expected = [(kind, b"\n".join(values)) for kind, values, _ in events]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=20)))
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=False)]
    assert _feed_all(reads) == expected


def test_event_names_decode_alike_on_every_path():
    # LF-only reads take the event-name cache; a CR sends the same lines through _field
    lf = b"event: content_block_delta\ndata: a\n\nevent: \ndata: b\n\nevent:message_stop\ndata: c\n\n"
    for body in (lf, lf.replace(b"\n", b"\r\n")):
        for _ in range(2):  # the second time from the cache
            assert SSEParser().feed(body) == [("content_block_delta", b"a"), (None, b"b"), ("message_stop", b"c")]
    assert SSEParser().feed("event: caf\u00e9\ndata: x\n\n".encode()) == [("caf\u00e9", b"x")]
