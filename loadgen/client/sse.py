"""Server-sent events, split from whole socket reads (no per-line awaits)."""

from __future__ import annotations

_FIELDS = (b"data", b"event", b"id", b"retry")


class StreamFault(Exception):
    """The stream broke the protocol; `kind` is the error type recorded for the request."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# An event larger than this fails its request as malformed (a server that never ends an event
# must not make the client hold and rescan all it sends); the compiled path's MAX_EVENT.
MAX_EVENT = 8 * 1024 * 1024


class SSEDecoder:
    """Feed raw bytes as they arrive; get back the `data` payload of every complete event.

    Events end with a blank line. Comment lines (`:`) and the `event`, `id` and `retry`
    fields are accepted and ignored; several `data` lines in one event are joined with a
    newline, as the SSE specification says. Any other line raises `StreamFault`
    ("malformed_sse"): a load tester must not silently skip what it cannot read. So does an
    event that grows past MAX_EVENT without its blank line.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        blocks = buf.split(b"\n\n")  # in C: the last piece is an unfinished event
        self._buf = blocks.pop()
        if len(self._buf) > MAX_EVENT:
            self._buf = b""
            raise StreamFault("malformed_sse", f"an SSE event over {MAX_EVENT >> 20} MiB without its blank line")
        out = [b[6:] for b in blocks if b[:6] == b"data: " and b"\n" not in b]
        if len(out) < len(blocks):  # comments, other fields, multi-line data, blank lines
            out = []
            for block in blocks:
                if block[:6] == b"data: " and b"\n" not in block:
                    out.append(block[6:])
                elif block:
                    payload = _parse_block(block)
                    if payload is not None:
                        out.append(payload)
        return out

    def flush(self) -> bytes | None:
        """At end of stream: the payload of an unterminated last event, if any."""
        rest, self._buf = self._buf.strip(b"\n"), b""
        return _parse_block(rest) if rest else None


def _parse_block(block: bytes) -> bytes | None:
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if name not in _FIELDS:
            shown = line[:80].decode("utf-8", "replace")
            raise StreamFault("malformed_sse", f"not an SSE line: {shown!r}")
        if name == b"data":
            data.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(data) if data else None
