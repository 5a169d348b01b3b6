"""Send one streaming request and record it exactly.

The send time is when the request's bytes are handed to the socket (an aiohttp trace hook
that runs right before the write), not when the HTTP library was called: under load the
library's own work and its body-writer task (a separate task on Python 3.11) delay the write
by up to milliseconds, and that is the client's delay (lateness), not the server's TTFT.

The hot path: one time per socket read, and the read's events recorded right as the read
reaches aiohttp's protocol (`_StampingHandler`; split by `SSEDecoder`, interpreted by
`events.on_events`): no task switch per read, and a chunk's time does not wait for a task to be
scheduled (under load the loop runs many reads before any reader task: that wait was most of
the client's timing error). The time is when the event loop's select() returned with the
socket readable (`SelectClock`): a burst of streams whose chunks arrive together (a server
writes a whole engine step's chunks at once) is read one socket after another, and the last
of a burst of 64 would otherwise be stamped milliseconds after its bytes arrived. The request's task only
waits for the body's end. Every failure becomes an error type on the
record; nothing but cancellation escapes `send`.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import time
from collections.abc import Mapping

import aiohttp
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from loadgen.client.bodies import ENDPOINTS
from loadgen.client.events import error_message, on_event, on_events, page_text
from loadgen.client.record import RequestRecord, ended, fail, request_id, timed_out
from loadgen.client.selectclock import install, read_time
from loadgen.client.sse import SSEDecoder, StreamFault

_monotonic_ns = time.monotonic_ns
_MAX_ERROR_BODY = 64 * 1024


async def _on_request_bytes(_session, ctx, _params) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord) and rec.t_send_ns == rec.t_call_ns:
        rec.t_send_ns = _monotonic_ns()


class _StampingHandler(ResponseHandler):
    """aiohttp's connection protocol, plus when each socket read arrived. While a `_BodyReader`
    is attached for the response being read, the read's body bytes go to it right here, with
    the read's time: no task switch per read. Before one is attached (bytes that came with the
    headers), each read is noted as (the body's bytes so far, its time)."""

    loadgen_stamps: tuple = ()  # ((payload, [(bytes so far, t, blind), ...]), the previous one)
    loadgen_reader: _BodyReader | None = None

    def data_received(self, data: bytes) -> None:
        t, blind = read_time(self._loop)
        super().data_received(data)
        payload = self._payload
        if payload is None:
            return
        reader = self.loadgen_reader
        if reader is not None and reader.payload is payload:
            reader.take(t, blind)
            return
        stamps = self.loadgen_stamps
        if not stamps or stamps[0][0] is not payload:
            # a response read whole before its task ran releases the connection; the next
            # response on it must not hide the stamps of the one not yet read
            self.loadgen_stamps = stamps = ((payload, []), *stamps[:1])
        stamps[0][1].append((payload.total_bytes, t, blind))

    def stamps_of(self, payload) -> list:
        return next((s for p, s in self.loadgen_stamps if p is payload), [])


class _BodyReader:
    """Takes a streamed body's bytes as the protocol receives them and records their events.
    A fault (the stream broke the protocol, or a bug here) ends the body with that exception,
    which the request's task then raises. Reading can make aiohttp resume its parser and hand
    over more data re-entrantly: that data is left to the outer call, with its own time."""

    __slots__ = ("rec", "payload", "feed", "t", "_busy", "_t_next")

    def __init__(self, rec: RequestRecord, payload: aiohttp.StreamReader, feed) -> None:
        self.rec, self.payload, self.feed, self.t = rec, payload, feed, 0
        self._busy, self._t_next = False, 0

    def take(self, t: int, blind: int = 0) -> None:
        if self._busy:
            self._t_next = t
            return
        payload = self.payload
        if payload.exception() is not None:
            return
        self._busy = True
        rec = self.rec
        try:
            while data := payload.read_nowait(-1):
                self.t = t
                first = not rec.chunk_t_ns
                on_events(rec, self.feed(data), t)
                if first and rec.chunk_t_ns:
                    rec.read_delay_ns = blind
                t = self._t_next or t
        except Exception as e:  # StreamFault, or a bug: the request records it
            payload.set_exception(e)
        finally:
            self._busy, self._t_next = False, 0


def chunk_times(session: aiohttp.ClientSession) -> str:
    """Where this session's chunk times are taken: "socket_read" (the protocol hook above) or
    "buffered_read" (an aiohttp whose internals the hook does not fit: when the reading task
    runs, which under load is later)."""
    factory = getattr(session.connector, "_factory", None)
    return "socket_read" if getattr(factory, "func", None) is _StampingHandler else "buffered_read"


def make_session(max_in_flight: int | None) -> aiohttp.ClientSession:
    """One session for a run. Its pool is sized to the load (unlimited when the load is), so
    no request ever waits silently inside the connection pool. Call it in the loop that runs the
    requests: it puts the select clock on that loop."""
    install()
    connector = aiohttp.TCPConnector(
        limit=max_in_flight or 0, limit_per_host=0, ttl_dns_cache=300, enable_cleanup_closed=True
    )
    if (
        isinstance(getattr(connector, "_factory", None), functools.partial)
        and connector._factory.func is ResponseHandler
    ):  # else: stamped per buffered read
        connector._factory = functools.partial(  # type: ignore[assignment]  # a ResponseHandler subclass
            _StampingHandler, *connector._factory.args, **connector._factory.keywords
        )
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_on_request_bytes)
    return aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        trace_configs=[trace],
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
    )


class StreamClient:
    """Streams requests to `{api_base}{endpoint}` over one shared aiohttp session."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        api_base: str,
        endpoint: str,
        headers: Mapping[str, str],
        timeout_s: float,
        keep_text: bool = False,
    ) -> None:
        self.session = session
        self.url = URL(api_base.rstrip("/") + ENDPOINTS[endpoint])  # parsed once, not per request
        self.headers = {"Content-Type": "application/json", **headers}
        self.timeout_s = timeout_s
        self.keep_text = keep_text

    async def close(self) -> None:
        """Nothing of its own to close: the session is the run's."""

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        if self.keep_text and rec.chunk_text is None:
            rec.chunk_text = []
        rec.t_call_ns = rec.t_send_ns = _monotonic_ns()
        try:
            async with asyncio.timeout(self.timeout_s):
                headers = {**self.headers, "X-Request-Id": request_id(rec).decode()}
                async with self.session.post(self.url, data=body, headers=headers, trace_request_ctx=rec) as resp:
                    rec.t_headers_ns = _monotonic_ns()
                    rec.status = resp.status
                    if resp.status != 200:
                        await _http_error(rec, resp)
                    elif "text/event-stream" not in resp.headers.get("Content-Type", ""):
                        fail(
                            rec,
                            "not_streaming",
                            "response is not text/event-stream "
                            f"(Content-Type: {resp.headers.get('Content-Type', 'none')})",
                        )
                    else:
                        await self._read_stream(rec, resp)
        except StreamFault as f:
            fail(rec, f.kind, f.message)
        except TimeoutError:
            timed_out(rec, self.timeout_s)
        except aiohttp.ClientError as e:
            fail(rec, *_classify(e, mid_response=rec.status is not None))
        except ConnectionResetError as e:
            fail(rec, "reset", f"connection reset: {e}")
        except asyncio.CancelledError:
            fail(rec, "cancelled", "run interrupted")
            raise
        except Exception as e:  # a bug in the client must not end the run: record it
            fail(rec, "client_exception", f"{type(e).__name__}: {e}")
        finally:
            if not rec.t_end_ns:
                rec.t_end_ns = _monotonic_ns()
        return ended(rec, rec.t_end_ns)

    async def _read_stream(self, rec: RequestRecord, resp: aiohttp.ClientResponse) -> None:
        content = resp.content
        decoder = SSEDecoder()
        # the response's own protocol, also when the whole body came before this task ran
        # (aiohttp then has already released the connection: resp.connection is None)
        proto = getattr(resp, "_protocol", None)
        if not isinstance(proto, _StampingHandler):
            return await _read_buffered(rec, content, decoder)
        reader = _BodyReader(rec, content, decoder.feed)
        if content.exception() is None and (data := content.read_nowait(-1)):
            _split_at_stamps(rec, data, proto.stamps_of(content), decoder.feed, reader)
        if content.exception() is None and not content.is_eof():
            proto.loadgen_reader = reader  # the connection is still this response's
            try:
                await content.wait_eof()
            finally:
                if proto.loadgen_reader is reader:
                    proto.loadgen_reader = None
        if (fault := content.exception()) is not None:
            raise fault  # set by the reader after the body had already ended
        if data := content.read_nowait(-1):
            reader.t = _monotonic_ns()  # not expected: bytes that reached no read hook
            on_events(rec, decoder.feed(data), reader.t)
        rest = decoder.flush()
        if rest is not None:
            on_event(rec, rest, reader.t)
        if not rec.t_end_ns:
            rec.t_end_ns = reader.t or _monotonic_ns()


def _split_at_stamps(rec: RequestRecord, data: bytes, stamps: list, feed, reader: _BodyReader) -> None:
    """Record `data` (the body's first bytes) with the times of the reads that brought them."""
    pos = 0
    for upto, t, blind in stamps:
        if upto > pos:
            reader.t = t
            first = not rec.chunk_t_ns
            on_events(rec, feed(data[pos:upto]), t)
            if first and rec.chunk_t_ns:
                rec.read_delay_ns = blind
            pos = upto
    if pos < len(data):
        reader.t = _monotonic_ns()
        on_events(rec, feed(data[pos:]), reader.t)


async def _read_buffered(rec: RequestRecord, content: aiohttp.StreamReader, decoder: SSEDecoder) -> None:
    """Without the read hook (another aiohttp connector): each buffered read, timed when read."""
    t = 0
    while data := await content.readany():
        t = _monotonic_ns()
        on_events(rec, decoder.feed(data), t)
    rest = decoder.flush()
    if rest is not None:
        on_event(rec, rest, t)
    if not rec.t_end_ns:
        rec.t_end_ns = t or _monotonic_ns()


def _classify(e: aiohttp.ClientError, mid_response: bool) -> tuple[str, str]:
    """Error type and message for a transport failure."""
    if isinstance(e, aiohttp.ClientConnectorError):
        refused = getattr(e.os_error, "errno", None) == errno.ECONNREFUSED
        return ("connection_refused" if refused else "connection_error"), str(e)
    if isinstance(e, aiohttp.ClientPayloadError):
        return "reset", f"response cut off: {e}"
    reset = isinstance(e, aiohttp.ServerDisconnectedError) or (
        isinstance(e, OSError) and e.errno in (errno.ECONNRESET, errno.EPIPE)
    )
    if reset:
        where = "mid-response" if mid_response else "before responding"
        return ("reset" if mid_response else "disconnected"), f"server closed the connection {where}: {e}"
    return "connection_error", f"{type(e).__name__}: {e}"


async def _http_error(rec: RequestRecord, resp: aiohttp.ClientResponse) -> None:
    raw = b""
    while len(raw) < _MAX_ERROR_BODY and (part := await resp.content.readany()):
        raw += part
    text = raw[:_MAX_ERROR_BODY].decode("utf-8", "replace").strip()
    try:
        message = error_message(json.loads(text))
    except ValueError:
        message = page_text(text) or resp.reason or ""
    fail(rec, f"http_{resp.status}", f"HTTP {resp.status}: {message[:300]}")
