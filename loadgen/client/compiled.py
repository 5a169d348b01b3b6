"""The compiled read path: streamed requests over our own HTTP/1.1 connections, every socket read
received, stamped, decoded and counted in C (loadgen/client/_hotpath.c).

Why: on the pure-Python path (aiohttp, `stream.py`) each read costs the interpreter tens of
microseconds before its chunks are counted, so one core read ~265k chunks/s, and a busy loop
delayed the reads whose times it stamped. Here a read is one C call, the event loop's own reader
callback, and its time is the kernel's (when the bytes reached the socket), so the loop being
busy no longer moves a chunk's time; only a read holding several events can be late for the
earlier ones, and each read bounds by how much (`bounds`, the self-check's view on this path;
docs/metrics.md, "The client's self-check").

It serves plain `http://` servers, which is what a load test talks to; anything else (https, a
proxy) goes the pure-Python way (`stream.StreamClient`). Events the C reader does not handle go
to the same Python code as there (`events.on_event`, `sse._parse_block`), so both paths record
the same thing by the same rules; errors land in the same types (docs/metrics.md, "Errors").
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import socket
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from loadgen.client.bodies import ENDPOINTS
from loadgen.client.events import MARKS, error_message, on_event, page_text
from loadgen.client.record import RequestRecord, ended, fail, request_id, timed_out
from loadgen.client.selectclock import SelectClock, install
from loadgen.client.sse import StreamFault, _parse_block

try:
    from loadgen.client import _hotpath
except ImportError:  # no compiler when the package was installed: the pure-Python path
    _hotpath = None  # type: ignore[assignment]
else:  # the events it leaves to the Python reader: those holding a dialect's per-request SD key
    _hotpath.set_marks(MARKS)

_monotonic_ns = time.monotonic_ns
_MAX_ERROR_BODY = 64 * 1024
CONNECT_TIMEOUT_S = 30.0


def available() -> bool:
    """Whether the compiled reader was built (the package's install compiles it where it can)."""
    return _hotpath is not None


def serves(api_base: str) -> bool:
    """Whether the compiled path can talk to this server: built, and plain HTTP."""
    return _hotpath is not None and urlsplit(api_base).scheme == "http"


class _Failed(Exception):
    """A request's failure as its record keeps it: error type and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


class _Connection:
    """One keep-alive connection: its socket, its C reader, and the exchange it serves."""

    __slots__ = ("sock", "reader", "loop", "pool", "closed", "exchange")

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, pool: Pool) -> None:
        self.sock, self.loop, self.pool = sock, loop, pool
        self.closed = False
        self.exchange: _Exchange | None = None
        self.reader = _hotpath.Conn(sock.fileno(), self._notify, pool.clock)
        loop.add_reader(sock.fileno(), self.reader.read)

    def _notify(self, code: int) -> None:
        ex = self.exchange
        if ex is not None:
            ex.on(code)
        elif code in (_hotpath.EOF, _hotpath.ERROR):  # idle: the server closed it
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.loop.remove_reader(self.sock.fileno())
            except (ValueError, OSError):
                pass
            self.sock.close()
            self.reader.close()  # its callback is this object's: no cycle left behind


class _Exchange:
    """One request on one connection, from its bytes to the end of its response."""

    __slots__ = ("rec", "conn", "done", "reusable", "status", "mode", "reason")

    def __init__(self, rec: RequestRecord, conn: _Connection) -> None:
        self.rec, self.conn = rec, conn
        self.done: asyncio.Future = conn.loop.create_future()
        self.reusable = False
        self.status: int | None = None
        self.mode = 0
        self.reason = ""

    def on(self, code: int) -> None:
        if self.done.done():
            if code != _hotpath.DONE:  # closed (or broken) after its response: not to be reused
                self.reusable = False
            return
        try:
            if code == _hotpath.HEAD:
                self._head()
            elif code == _hotpath.DONE:
                self._end()
            elif code == _hotpath.EOF:
                self._eof()
            else:
                self._error(self.conn.reader.error)
        except Exception as e:  # a bug here must end this request, not the loop's callback
            self.done.set_exception(e)

    def _head(self) -> None:
        reader, rec = self.conn.reader, self.rec
        lines = reader.head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise _Failed("connection_error", f"not an HTTP/1.x response: {lines[0][:80]!r}")
        status = int(code)
        if 100 <= status < 200:
            return reader.expect_head()
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                key = name.strip().lower()
                headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        rec.t_headers_ns = reader.t_head
        rec.status = self.status = status
        self.reusable = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            mode, length = _hotpath.CHUNKED, 0
        elif "content-length" in headers:
            if not headers["content-length"].isdigit():
                raise _Failed("connection_error", f"invalid Content-Length: {headers['content-length'][:40]!r}")
            mode, length = _hotpath.LENGTH, int(headers["content-length"])
        elif status in (204, 304):
            mode, length = 0, 0
        else:
            mode, length = _hotpath.CLOSE, 0
            self.reusable = False
        self.mode = mode
        if status != 200:
            self.reason = reason
            reader.begin_body(mode, length, False)
        elif "text/event-stream" not in headers.get("content-type", ""):
            self.reusable = False
            raise _Failed(
                "not_streaming",
                f"response is not text/event-stream (Content-Type: {headers.get('content-type', 'none')})",
            )
        elif headers.get("content-encoding", "identity").lower() != "identity":
            self.reusable = False
            raise _Failed("connection_error", f"unasked-for Content-Encoding: {headers['content-encoding']}")
        else:
            reader.begin_body(mode, length, True)

    def _end(self) -> None:
        reader, rec = self.conn.reader, self.rec
        if reader.leftover:
            self.reusable = False
        if self.status != 200:
            raw = reader.body
            text = raw[:_MAX_ERROR_BODY].decode("utf-8", "replace").strip()
            try:
                message = error_message(json.loads(text))
            except ValueError:
                message = page_text(text) or self.reason
            raise _Failed(f"http_{self.status}", f"HTTP {self.status}: {message[:300]}")
        rest = reader.rest.strip(b"\n")  # an unterminated last event, as SSEDecoder.flush
        if rest:
            payload = _parse_block(rest)
            if payload is not None:
                on_event(rec, payload, reader.t_last)
        if not rec.t_end_ns:
            rec.t_end_ns = reader.t_last or _monotonic_ns()
        self.done.set_result(None)

    def _eof(self) -> None:
        reader = self.conn.reader
        self.reusable = False
        if self.status is not None and reader.in_body:
            if self.mode == _hotpath.CLOSE:
                reader.finish()
                return self._end()
            raise _Failed("reset", "response cut off: the server closed the connection mid-response")
        if self.status is None:
            raise _Failed("disconnected", "server closed the connection before responding: Server disconnected")
        self._end()  # closed after a whole response

    def _error(self, e: BaseException | None) -> None:
        self.reusable = False
        if isinstance(e, (StreamFault, _Failed)):
            raise e
        if isinstance(e, OSError):
            mid = self.status is not None
            if e.errno in (errno.ECONNRESET, errno.EPIPE):
                kind, where = ("reset", "mid-response") if mid else ("disconnected", "before responding")
                raise _Failed(kind, f"server closed the connection {where}: {e}")
            raise _Failed("connection_error", f"{type(e).__name__}: {e}")
        if _hotpath is not None and isinstance(e, _hotpath.FramingError):
            raise _Failed("connection_error", f"malformed HTTP response: {e}")
        if _hotpath is not None and isinstance(e, _hotpath.EventTooLarge):
            raise StreamFault("malformed_sse", str(e))  # as loadgen/client/sse.py's bound says it
        raise e if e is not None else _Failed("client_exception", "the reader failed without an error")


class Pool:
    """Keep-alive connections to one server, as many as the load has in flight (none waits)."""

    def __init__(self, host: str, port: int, clock: SelectClock | None) -> None:
        self.host, self.port, self.clock = host, port, clock
        self.idle: list[_Connection] = []
        self._addr: tuple | None = None
        self._family = socket.AF_INET

    async def acquire(self) -> _Connection:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and not conn.reader.leftover:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        if self._addr is None:  # each address the name has, in order, until one connects
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            last: OSError | None = None
            for family, *_, addr in infos:
                try:
                    sock = await self._connect(loop, family, addr)
                except OSError as e:
                    last = e
                    continue
                self._family, self._addr = family, addr  # the next connections go straight there
                return _Connection(sock, loop, self)
            raise last or OSError(f"no address for {self.host}")
        return _Connection(await self._connect(loop, self._family, self._addr), loop, self)

    @staticmethod
    async def _connect(loop, family, addr) -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await loop.sock_connect(sock, addr)
        except BaseException:
            sock.close()
            raise
        return sock

    def release(self, conn: _Connection, reusable: bool) -> None:
        conn.exchange = None
        conn.reader.release()
        if reusable and not conn.closed:
            self.idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


class CompiledClient:
    """Streams requests to `{api_base}{endpoint}` on the compiled path (`serves(api_base)`)."""

    chunk_times = "kernel_receive"

    def __init__(
        self, api_base: str, endpoint: str, headers: Mapping[str, str], timeout_s: float, keep_text: bool = False
    ) -> None:
        url = urlsplit(api_base.rstrip("/") + ENDPOINTS[endpoint])
        host, port = url.hostname or "127.0.0.1", url.port or 80
        self.pool = Pool(host, port, install())  # made in the loop that runs the requests
        self.where = f"{host}:{port}"
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        head = {"Host": url.netloc, "Content-Type": "application/json", "Accept": "*/*", **headers}
        self.close_after = head.get("Connection", "").lower() == "close"
        self._head = (
            f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "X-Request-Id: "
        ).encode("latin-1")
        self.timeout_s = timeout_s
        self.keep_text = keep_text

    async def close(self) -> None:
        self.pool.close()

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        if self.keep_text and rec.chunk_text is None:
            rec.chunk_text = []
        rec.t_call_ns = rec.t_send_ns = _monotonic_ns()
        conn: _Connection | None = None
        ex: _Exchange | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                try:
                    conn = await self.pool.acquire()
                except OSError as e:
                    raise _connect_failure(e, self.where) from None
                except TimeoutError:  # the connect's own limit, not the request's
                    raise _Failed("connection_error", f"Cannot connect to host {self.where} [timed out]") from None
                ex = conn.exchange = _Exchange(rec, conn)
                conn.reader.begin(rec, functools.partial(on_event, rec), _parse_block)
                data = self._head + b"%s\r\nContent-Length: %d\r\n\r\n" % (request_id(rec), len(body)) + body
                rec.t_send_ns = _monotonic_ns()
                try:
                    sent = conn.sock.send(data)
                    if sent < len(data):
                        await conn.loop.sock_sendall(conn.sock, memoryview(data)[sent:])
                except BlockingIOError:
                    await conn.loop.sock_sendall(conn.sock, data)
                except OSError as e:
                    ex.reusable = False
                    raise _Failed("disconnected", f"server closed the connection before responding: {e}") from None
                await ex.done
        except _Failed as f:
            fail(rec, f.kind, f.message)
        except StreamFault as f:
            fail(rec, f.kind, f.message)
        except TimeoutError:
            timed_out(rec, self.timeout_s)
        except asyncio.CancelledError:
            fail(rec, "cancelled", "run interrupted")
            raise
        except Exception as e:  # a bug in the client must not end the run: record it
            fail(rec, "client_exception", f"{type(e).__name__}: {e}")
        finally:
            if not rec.t_end_ns:
                rec.t_end_ns = _monotonic_ns()
            if conn is not None:
                done = ex is not None and ex.done.done() and not ex.done.cancelled() and ex.done.exception() is None
                self.pool.release(conn, done and ex.reusable and not self.close_after)  # type: ignore[union-attr]
        return ended(rec, rec.t_end_ns)


def _connect_failure(e: OSError, where: str) -> _Failed:
    if isinstance(e, ConnectionRefusedError) or e.errno == errno.ECONNREFUSED:
        return _Failed("connection_refused", f"Cannot connect to host {where} [{e.strerror or e}]")
    return _Failed("connection_error", f"Cannot connect to host {where} [{e.strerror or e}]")


def bounds(reset: bool = False) -> list[tuple[int, int]]:
    """[(ns, chunks)]: per measured chunk, how far off the gap ending at it (the TTFT, for a
    first chunk) can be (the bin's top), over every chunk this process read on the compiled path
    since the last reset (loadgen/client/_hotpath.c)."""
    return _hotpath.bounds(reset) if _hotpath is not None else []


def stamps(reset: bool = False) -> dict[str, int]:
    """How this process's measured reads that held chunks were timed since the last reset: by
    the kernel's receive stamp, or (none came: the socket option refused, or a read without
    one) at select()'s return, which bounds() then counts as late by up to the loop's delay."""
    stamped, unstamped = _hotpath.stamps(reset) if _hotpath is not None else (0, 0)
    return {"kernel_receive": stamped, "select_return": unstamped}


def chunk_times(reads: dict[str, int]) -> str | None:
    """What the self-check reports as where chunk times were taken, from `stamps()`: one of
    the two, "mixed" when reads of both kinds came, None when no read held a chunk."""
    taken = [k for k, n in reads.items() if n]
    return taken[0] if len(taken) == 1 else ("mixed" if taken else None)
