"""A minimal HTTP/1.1 server on an asyncio protocol: exactly what a measuring instrument needs
and nothing that costs time. Requests carry the monotonic time their first byte arrived;
responses are written straight to the transport (whole bodies, or chunked streams).

Supported: request bodies with Content-Length or `Transfer-Encoding: chunked` (as the `openai`
SDK and httpx send a streamed body; trailers are read and dropped), keep-alive, one request at a
time per connection, flow control.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    t_recv: float  # time.monotonic() when its first byte arrived


Handler = Callable[[HttpRequest, "HttpConnection"], Awaitable[None]]


class HttpConnection(asyncio.Protocol):
    def __init__(self, handler: Handler, send_buffer: int | None = None) -> None:
        self._handler = handler
        # bytes a response may hold unsent before the server waits for its reader (the socket's
        # send buffer and the transport's high-water mark); None: the system's (emulator --send-buffer)
        self.send_buffer = send_buffer
        self._buf = b""
        self._t_first: float | None = None
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made, first
        self._task: asyncio.Task | None = None
        self._closed = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._keep_alive = True

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.send_buffer is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            except OSError:
                pass
        if self.send_buffer is not None:
            transport.set_write_buffer_limits(high=self.send_buffer)

    def data_received(self, data: bytes) -> None:
        if self._t_first is None:
            self._t_first = time.monotonic()
        self._buf += data
        if self._task is None:
            self._next_request()

    def connection_lost(self, exc) -> None:
        self._closed = True
        self._writable.set()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- request parsing -------------------------------------------------------------------
    def _next_request(self) -> None:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > _MAX_HEAD:
                self.respond(413, b"request head too large", close=True)
            return
        try:
            head = self._buf[:end].decode("latin-1").split("\r\n")
            method, target, version = head[0].split(" ", 2)
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
        except ValueError:
            self.respond(400, b"malformed request", close=True)
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            try:
                got = _dechunk(self._buf, end + 4)
            except ValueError as e:
                self.respond(400, f"malformed chunked request body: {e}".encode(), close=True)
                return
            if got is None:
                if len(self._buf) > _MAX_BODY + _MAX_HEAD:
                    self.respond(413, b"request body too large", close=True)
                return  # wait for the rest of the body
            body, used = got
            self._buf = self._buf[used:]
        else:
            if length > _MAX_BODY:
                self.respond(413, b"request body too large", close=True)
                return
            if len(self._buf) < end + 4 + length:
                return  # wait for the rest of the body
            body = self._buf[end + 4 : end + 4 + length]
            self._buf = self._buf[end + 4 + length :]
        self._keep_alive = headers.get("connection", "").lower() != "close" and version != "HTTP/1.0"
        t_first = self._t_first if self._t_first is not None else time.monotonic()
        req = HttpRequest(method, target.split("?", 1)[0], headers, body, t_first)
        self._t_first = time.monotonic() if self._buf else None
        self._task = asyncio.get_running_loop().create_task(self._run(req))

    async def _run(self, req: HttpRequest) -> None:
        try:
            await self._handler(req, self)
        except asyncio.CancelledError:
            return
        except Exception as e:  # a handler bug answers 500, never kills the server
            if not self._closed:
                self.respond(500, f"scripted server error: {type(e).__name__}: {e}".encode())
        self._task = None
        if self._closed:
            return
        if not self._keep_alive:
            self.transport.close()
        elif self._buf:
            self._next_request()

    # -- responses -------------------------------------------------------------------------
    def _head(self, status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if not self._keep_alive:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "text/plain",
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        if self._closed:
            return
        if close:
            self._keep_alive = False
        h = {"Content-Type": content_type, "Content-Length": str(len(body)), **(headers or {})}
        self.transport.write(self._head(status, h) + body)
        if close:
            self.transport.close()
            self._closed = True

    def start_stream(self, status: int = 200, content_type: str = "text/event-stream") -> None:
        self.transport.write(
            self._head(
                status, {"Content-Type": content_type, "Cache-Control": "no-cache", "Transfer-Encoding": "chunked"}
            )
        )

    def write_chunk(self, data: bytes) -> None:
        if data and not self._closed:
            self.transport.write(frame_chunk(data))

    def write_framed(self, data: bytes) -> None:
        """Write bytes already framed for chunked encoding (frame_chunk), e.g. pre-rendered."""
        if not self._closed:
            self.transport.write(data)

    def end_stream(self) -> None:
        if not self._closed:
            self.transport.write(b"0\r\n\r\n")

    async def drain(self) -> None:
        if not self._writable.is_set():
            await self._writable.wait()

    @property
    def writable(self) -> bool:
        """False while the transport holds more than its high-water mark: the reader is behind."""
        return self._writable.is_set()

    @property
    def closed(self) -> bool:
        return self._closed

    def reset(self) -> None:
        """Abort with a TCP RST (SO_LINGER 0), as a crashed proxy would."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self._closed = True
        self.transport.abort()


def _dechunk(buf: bytes, at: int) -> tuple[bytes, int] | None:
    """A chunked body starting at buf[at:]: (body, where the request ends), None while it is
    incomplete, ValueError when it is malformed."""
    parts: list[bytes] = []
    while True:
        eol = buf.find(b"\r\n", at)
        if eol < 0:
            return None
        size = int(buf[at:eol].split(b";", 1)[0].strip() or b"x", 16)  # chunk extensions dropped
        if size < 0:
            raise ValueError("negative chunk size")
        if size == 0:
            end = buf.find(b"\r\n\r\n", eol)  # the trailer section, usually empty
            if buf[eol : eol + 4] == b"\r\n\r\n":
                end = eol
            return None if end < 0 else (b"".join(parts), end + 4)
        start = eol + 2
        if len(buf) < start + size + 2:
            return None
        if buf[start + size : start + size + 2] != b"\r\n":
            raise ValueError("chunk not followed by CRLF")
        parts.append(buf[start : start + size])
        at = start + size + 2


def frame_chunk(data: bytes) -> bytes:
    """`data` as one chunk of HTTP/1.1 chunked transfer encoding."""
    return b"%x\r\n%b\r\n" % (len(data), data)


async def serve(handler: Handler, host: str, port: int, send_buffer: int | None = None) -> asyncio.base_events.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpConnection(handler, send_buffer), host, port, backlog=4096, reuse_address=True
    )


async def announce_and_wait(listener: asyncio.base_events.Server, host: str) -> None:
    """Print `listening on http://HOST:PORT` (what servers.embedded waits for), then serve
    until SIGINT or SIGTERM, and close the listener."""
    import signal

    port = listener.sockets[0].getsockname()[1]
    print(f"listening on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    listener.close()


def run_until_stopped(
    handler: Handler, host: str, port: int, prog: str, on_close: Callable[[], None] | None = None
) -> None:
    """Serve `handler` on host:port until SIGINT or SIGTERM (announced as above), then call
    `on_close` inside the loop. A port that cannot be bound is one line on stderr (exit 1)."""

    async def main() -> None:
        listener = await serve(handler, host, port)
        try:
            await announce_and_wait(listener, host)
        finally:
            if on_close is not None:
                on_close()

    try:
        asyncio.run(main())
    except OSError as e:
        sys.exit(f"{prog}: error: cannot listen on {host}:{port}: {e.strerror}")


def server_parser(prog: str, doc: str | None, model: str) -> argparse.ArgumentParser:
    """The flags every test server (servers/canned, servers/scripted) takes: where it listens,
    the model it serves, how many SSE events a socket write carries, and a trace file."""
    p = argparse.ArgumentParser(prog=prog, description=doc)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 lets the OS choose")
    p.add_argument("--model", default=model, help="served model name")
    p.add_argument("--events-per-write", type=int, default=1, help="SSE events per socket write")
    p.add_argument("--trace", default=None, help="append per-response write times (JSONL) to FILE")
    return p


def models_list(model: str) -> bytes:
    """A test server's /v1/models: its one model, owned by loadgen (no engine's dialect)."""
    entry = {
        "id": model,
        "object": "model",
        "created": 0,
        "owned_by": "loadgen",
        "root": model,
        "max_model_len": 1 << 20,
    }
    return json.dumps({"object": "list", "data": [entry]}).encode()
