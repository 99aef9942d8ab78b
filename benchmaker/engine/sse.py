"""Incremental Server-Sent Events parser over bytes (WHATWG HTML "event stream" rules).

    parser = SSEParser()
    for event, data in parser.feed(read_bytes):   # once per transport read
        ...                                       # data: bytes of one complete event
    cut = parser.close()                          # at end of body

Source: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation

Rules implemented, and where they matter for measurement:

- Lines end at CRLF, LF or CR, and nowhere else. `str.splitlines` (hence httpx
  `aiter_lines()`) also splits at U+2028, U+0085, form feed etc., which cuts a JSON
  chunk whose text holds them (httpx-sse #34). We split the *bytes*: CR and LF never occur
  inside a multi-byte UTF-8 sequence, so a read boundary inside a code point or a JSON
  string is harmless, and data is never decoded per read.
- A CRLF split across two reads (CR ends one read, LF starts the next) is one line end.
- An empty line dispatches the event; an event without `data:` lines is not dispatched.
  Several `data:` lines join with LF. One space after the colon is removed.
- `:` lines are comments (keep-alives) and are ignored; `event:` sets the event's type;
  `id:` sets `last_event_id` (ignored when it holds NUL); `retry:` sets `retry_ms` when
  it is all ASCII digits; other fields are ignored. A leading UTF-8 BOM is skipped.
- At end of stream WHATWG discards an event that lacks its final empty line. `close()`
  returns that event's data instead of dropping it silently, so the caller can decide
  (e.g. accept a final `data: [DONE]` without its blank line) and knows it was cut.

Data is returned as the raw UTF-8 bytes of the event (never decoded here): `orjson.loads`
reads bytes directly, and invalid UTF-8 fails there as bad JSON rather than being
replaced with U+FFFD as the spec's decoder would.

Speed: the common shape `data: {...}\\n\\n` without CR takes a `bytes.find(b"\\n")` loop
with the `data: ` prefix tested in place; any CR in the buffered bytes sends that read
through the general line splitter. A read that is exactly one such event at an event
boundary (a server flushing each token event) skips the loop: ~0.7 us per read instead
of ~2 us on a busy reference machine. `benchmarks/sse_parse.py` measures
events/s.
"""

from __future__ import annotations

import re

__all__ = ["SSEEvent", "SSEParser"]

# One dispatched event: (type, data). type is the `event:` field's value, or None when the
# event had none (WHATWG type "message"); data is the UTF-8 bytes of its data lines
# joined with LF.
SSEEvent = tuple[str | None, bytes]

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")
# `event: NAME` values already decoded, by their bytes: a typed stream repeats a few names
# per event (Anthropic `content_block_delta`), and the decode was a third of its SSE cost
_EVENT_NAMES: dict[bytes, str] = {}


class SSEParser:
    """Incremental event-stream parser; one instance per response body.

    `feed(data)` takes the bytes of one read (any split) and returns the events it
    completed, in order, as `(event_type | None, data_bytes)` tuples. `close()` ends the
    stream. Memory held between reads: the bytes of one incomplete line plus the data
    of one incomplete event.
    """

    __slots__ = ("_tail", "_data", "_event", "_skip_lf", "_started", "last_event_id", "retry_ms")

    def __init__(self) -> None:
        self._tail = b""  # bytes after the last line end seen
        self._data: bytes | None = None  # data buffer of the event being built
        self._event: str | None = None  # event type buffer
        self._skip_lf = False  # the last read ended with CR: a leading LF belongs to it
        self._started = False  # BOM check done
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Parse one read; return the events it completed (possibly none)."""
        # A read that is exactly one `data: X` event at an event boundary (a server that
        # flushes each event as it is made: one read per token event) skips the line
        # loop: X holds no LF (the first LF is the event's own) and the read no CR.
        n = len(data)
        if (
            n >= 8
            and self._data is None
            and self._event is None
            and not self._tail
            and self._started
            and not self._skip_lf
            and data.startswith(b"data: ")
            and data.find(b"\n") == n - 2
            and data[-1] == 10
            and b"\r" not in data
        ):
            return [(None, data[6:-2])]
        if not self._started:
            data = self._tail + data
            self._tail = b""
            if len(data) < 3 and _BOM.startswith(data):
                self._tail = data  # maybe a BOM split across reads
                return []
            self._started = True
            if data.startswith(_BOM):
                data = data[3:]
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == 10:  # LF completing a CRLF split across reads
                data = data[1:]
        if self._tail:
            data = self._tail + data
            self._tail = b""
        out: list[SSEEvent] = []
        if b"\r" in data:
            self._general(data, out)
            return out
        # Fast path: LF-only line ends.
        find = data.find
        startswith = data.startswith
        pos = 0
        while True:
            nl = find(b"\n", pos)
            if nl < 0:
                break
            if nl == pos:  # empty line: dispatch
                if self._data is not None:
                    out.append((self._event, self._data))
                    self._data = None
                self._event = None
            elif startswith(b"data: ", pos):
                value = data[pos + 6 : nl]
                self._data = value if self._data is None else self._data + b"\n" + value
            elif startswith(b"event: ", pos):  # typed events (Anthropic Messages, Responses): names repeat
                name = data[pos + 7 : nl]
                event = _EVENT_NAMES.get(name)
                if event is None:
                    event = name.decode("utf-8", "replace")
                    if len(_EVENT_NAMES) < 64:
                        _EVENT_NAMES[name] = event
                self._event = event or None
            else:
                self._field(data[pos:nl])
            pos = nl + 1
        if pos < len(data):
            self._tail = data[pos:]
        return out

    def close(self) -> bytes | None:
        """End of stream: return the data of an event cut before its final empty line
        (WHATWG discards it), or None when the stream ended on an event boundary.

        A last line without its line end counts as a line. The parser is reset.
        """
        if self._tail:
            tail, self._tail = self._tail, b""
            if self._started or not _BOM.startswith(tail):
                self._line(tail, [])
        data = self._data
        self._data = None
        self._event = None
        self._skip_lf = False
        return data

    def _general(self, data: bytes, out: list[SSEEvent]) -> None:
        """Split on CRLF, CR and LF (the reads holding any CR)."""
        pos = 0
        n = len(data)
        for m in _LINE_END.finditer(data):
            self._line(data[pos : m.start()], out)
            pos = m.end()
            if pos == n and m.group() == b"\r":
                self._skip_lf = True  # an LF may start the next read
        if pos < n:
            self._tail = data[pos:]

    def _line(self, line: bytes, out: list[SSEEvent]) -> None:
        if not line:
            if self._data is not None:
                out.append((self._event, self._data))
                self._data = None
            self._event = None
        else:
            self._field(line)

    def _field(self, line: bytes) -> None:
        """Process one non-empty line (WHATWG "process the field")."""
        if line[0] == 58:  # ':' comment / keep-alive
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data = value if self._data is None else self._data + b"\n" + value
        elif name == b"event":
            self._event = value.decode("utf-8", "replace") or None
        elif name == b"id":
            if b"\0" not in value:
                self.last_event_id = value.decode("utf-8", "replace")
        elif name == b"retry":
            if value and value.isdigit():
                self.retry_ms = int(value)
