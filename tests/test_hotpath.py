"""The compiled read path (loadgen/client/_hotpath.c) records exactly what the pure-Python path
records, read by read: the same streams (every kind of event the client knows, split into reads
at random places, HTTP chunked framing included) through both, and the records compared whole.
Its socket side (kernel times, the spread of a read) is tested against a real socket."""

from __future__ import annotations

import functools
import json
import os
import random
import socket
import time

import pytest

from loadgen.client import compiled
from loadgen.client.events import on_event, on_events
from loadgen.client.record import RequestRecord
from loadgen.client.sse import SSEDecoder, StreamFault, _parse_block

COMPILED_SKIP: list = []  # the compiled path's tests skip where it was not built
if not compiled.available():
    why = "the compiled path was not built (no C compiler)"
    # LOADGEN_REQUIRE_COMPILED=1 (.ci/run): the install already failed without it; a package
    # installed otherwise (a stale one, a pure-Python copy) must not pass by skipping
    if os.environ.get("LOADGEN_REQUIRE_COMPILED") == "1":
        pytest.fail(why + " but LOADGEN_REQUIRE_COMPILED=1", pytrace=False)
    COMPILED_SKIP = [pytest.mark.skip(reason=why)]
else:
    from loadgen.client import _hotpath

pytestmark = [pytest.mark.unit, *COMPILED_SKIP]


_SD = {"num_draft_tokens": 9, "num_accepted_draft_tokens": 4}


def _chunk(
    i: int, *, usage=True, text=" tok", finish=None, prompt: int | None = 16, extra: dict | None = None
) -> bytes:
    delta: dict = {"content": text} if text is not None else {}
    obj: dict = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        obj["usage"] = {"completion_tokens": i} if prompt is None else {"prompt_tokens": prompt, "completion_tokens": i}
    if extra:
        obj.update(extra)
    return json.dumps(obj, separators=(",", ":")).encode()


def _final_usage(n: int, extra: dict | None = None) -> bytes:
    obj: dict = {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": n}}
    if extra:
        obj.update(extra)
    return json.dumps(obj).encode()


def _reasoning(i: int, thinking: bool) -> bytes:
    delta = {"reasoning": "hmm"} if thinking else {"content": "ok"}
    usage = {"prompt_tokens": 16, "completion_tokens": i, "completion_tokens_details": {"reasoning_tokens": i}}
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}], "usage": usage}).encode()


def _streams() -> dict[str, list[bytes]]:
    """Event payloads of each kind of stream the client reads (the SSE framing added later)."""
    n = 40
    counted = [_chunk(i + 1, finish="length" if i == n - 1 else None) for i in range(n)]
    return {
        "counted": [*counted, _final_usage(n), b"[DONE]"],
        "multi-token": [_chunk(i, finish="stop" if i == 60 else None) for i in range(3, 61, 3)] + [b"[DONE]"],
        "no usage": [_chunk(i + 1, usage=False) for i in range(20)] + [_final_usage(20), b"[DONE]"],
        "spaced json": [json.dumps(json.loads(p)).encode() for p in counted] + [b"[DONE]"],
        "repeats and zeros": [_chunk(1), _chunk(1, text=""), _chunk(2), _chunk(2), _chunk(5), b"[DONE]"],
        "reasoning": [_reasoning(i + 1, i < 10) for i in range(20)] + [b"[DONE]"],
        "tool call": [_chunk(1)]
        + [
            json.dumps(
                {
                    "choices": [{"delta": {"tool_calls": [{"function": {"arguments": "{}"}}]}, "finish_reason": None}],
                    "usage": {"prompt_tokens": 16, "completion_tokens": i},
                }
            ).encode()
            for i in range(2, 8)
        ]
        + [b"[DONE]"],
        "draft counts": counted[:10] + [_final_usage(10, {"metrics": {"speculative_decoding": _SD}})] + [b"[DONE]"],
        "after done": [*counted[:5], b"[DONE]", counted[5]],
        "no prompt count": [_chunk(i + 1, prompt=None) for i in range(5)] + [b"[DONE]"],
        "error event": [*counted[:5], b'{"error":{"message":"engine died","code":500}}'],
        "not json": [*counted[:3], b"{not json}"],
        "huge count": [_chunk(10**20)] + [b"[DONE]"],
        "key in text": [_chunk(i + 1, text='"completion_tokens":99') for i in range(5)] + [b"[DONE]"],
    }


def _sse(payloads: list[bytes], rng: random.Random, crlf: bool = False) -> bytes:
    out = b""
    for p in payloads:
        if rng.random() < 0.05:
            out += b": a comment\n\n"
        if rng.random() < 0.05:
            out += b"event: message\nid: 7\n"
        out += b"data: " + p + b"\n\n"
    return out.replace(b"\n", b"\r\n") if crlf else out


def _chunked(body: bytes, rng: random.Random) -> bytes:
    out, i = b"", 0
    while i < len(body):
        n = rng.randint(1, 700)
        out += b"%x\r\n" % len(body[i : i + n]) + body[i : i + n] + b"\r\n"
        i += n
    return out + b"0\r\n\r\n"


def _reads(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 60))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def _record(index: int = 0, **kw) -> RequestRecord:
    return RequestRecord(index=index, request_id="r", warmup=False, t_scheduled_ns=0, **kw)


def _python(reads: list[bytes], times: list[int], rec: RequestRecord) -> str | None:
    """The pure-Python path's reading of a body (after the HTTP layer): SSEDecoder + on_events."""
    decoder = SSEDecoder()
    try:
        for data, t in zip(reads, times):
            on_events(rec, decoder.feed(data), t)
        rest = decoder.flush()
        if rest is not None:
            on_event(rec, rest, times[-1])
    except StreamFault as f:
        return f.kind
    except Exception as e:  # a fault of the client's own (as a request, it is recorded so)
        return type(e).__name__
    return None


_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _compiled(reads: list[bytes], times: list[int], rec: RequestRecord) -> str | None:
    """The compiled reader's: the head, then the framed body read by read."""
    conn, codes = _reader(rec)
    for data, t in zip(reads, times):
        conn.feed(data, t)
        if _hotpath.ERROR in codes:
            e = conn.error
            return e.kind if isinstance(e, StreamFault) else type(e).__name__
    assert codes == [_hotpath.HEAD, _hotpath.DONE], codes
    rest = conn.rest.strip(b"\n")
    try:
        if rest and (payload := _parse_block(rest)) is not None:
            on_event(rec, payload, times[-1])
    except StreamFault as f:
        return f.kind
    return None


@pytest.mark.parametrize("kind", list(_streams()))
@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_reader_records_what_the_python_path_records(kind, seed):
    rng = random.Random(f"{kind}-{seed}")
    payloads = _streams()[kind]
    body = _sse(payloads, rng, crlf=seed == 5)
    framed = _chunked(body, rng)
    # the same body bytes in the same reads: cut the framed stream, and map each cut to the body
    reads = _reads(_HEAD + framed, rng)
    times = sorted(rng.randint(1, 10**9) for _ in reads)
    keep = {"chunk_text": [] if seed == 4 else None}
    py, c = _record(**keep), _record(**keep)
    c_fault = _compiled(reads, times, c)
    # the Python path reads the decoded body with the times of the reads that brought each byte
    body_reads, body_times = [], []
    for part, t in zip(_dechunk_by_read(reads, len(_HEAD)), times):
        if part:
            body_reads.append(part)
            body_times.append(t)
    py_fault = _python(body_reads, body_times, py)
    assert c_fault == py_fault
    if py_fault is None:
        assert c == py, kind
    else:  # a fault ends both; the compiled one has also kept its read's events before the fault
        assert list(py.chunk_usage) == list(c.chunk_usage)[: len(py.chunk_usage)]


def _dechunk_by_read(reads: list[bytes], head_len: int) -> list[bytes]:
    """Each read's share of the decoded body (HTTP chunked framing taken off), by a plain parser."""
    whole = b"".join(reads)[head_len:]
    owner = []  # for each byte of `whole`, the read it came in
    for i, r in enumerate(reads):
        owner.extend([i] * len(r))
    owner = owner[head_len:]
    out = [bytearray() for _ in reads]
    i = 0
    while True:
        eol = whole.index(b"\r\n", i)
        size = int(whole[i:eol], 16)
        if size == 0:
            break
        start = eol + 2
        for j in range(start, start + size):
            out[owner[j]].append(whole[j])
        i = start + size + 2
    return [bytes(b) for b in out]


def _reader(rec: RequestRecord, fd: int = -1):
    """A C reader for `rec` whose response comes chunked as an event stream, and the codes it
    notified."""
    codes: list[int] = []

    def notify(code):
        codes.append(code)
        if code == _hotpath.HEAD:
            conn.begin_body(_hotpath.CHUNKED, 0, True)

    conn = _hotpath.Conn(fd, notify)
    conn.begin(rec, functools.partial(on_event, rec), _parse_block)
    return conn, codes


def test_framing_errors_and_heads_that_straddle_reads():
    rec = _record()
    conn, codes = _reader(rec)
    for i in range(len(_HEAD)):  # a byte a read
        conn.feed(_HEAD[i : i + 1], i + 1)
    assert codes == [_hotpath.HEAD] and conn.t_head == len(_HEAD)
    conn.feed(b"zz\r\n", 100)
    assert codes[-1] == _hotpath.ERROR and isinstance(conn.error, _hotpath.FramingError)


def _pair() -> tuple[socket.socket, socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    c = socket.create_connection(srv.getsockname())
    s, _ = srv.accept()
    srv.close()
    c.setblocking(False)
    return c, s


def test_a_read_is_stamped_when_its_bytes_arrived():
    """A chunk written, then read 20 ms later: its time is the write's (the kernel's receive
    time), not the read's. Two writes 30 ms apart read together take the later one's time (the
    kernel keeps one time for bytes it merged): the loop's lag over chunk times bounds that."""
    c, s = _pair()
    try:
        rec = _record()
        conn, codes = _reader(rec, c.fileno())
        assert conn.stamped
        compiled.bounds(reset=True)
        compiled.stamps(reset=True)
        s.sendall(_HEAD)
        time.sleep(0.01)
        conn.read()
        assert codes == [_hotpath.HEAD]
        events = [b"data: " + _chunk(i) + b"\n\n" for i in (1, 2, 3)]
        framed = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
        t_write = time.monotonic_ns()
        s.sendall(framed[0])
        time.sleep(0.02)
        conn.read()
        assert list(rec.chunk_usage) == [1]
        assert t_write <= rec.chunk_t_ns[0] < t_write + 2_000_000  # the bytes' arrival, not the read
        assert rec.read_delay_ns == 0  # one event, ended by the read's newest bytes: exact
        t_read = time.monotonic_ns()
        s.sendall(framed[1])
        time.sleep(0.03)
        t_second = time.monotonic_ns()
        s.sendall(framed[2])
        time.sleep(0.02)
        conn.read()
        assert list(rec.chunk_usage) == [1, 2, 3]
        assert rec.chunk_t_ns[1] == rec.chunk_t_ns[2]
        assert t_second <= rec.chunk_t_ns[2] < t_second + 2_000_000
        # the second chunk's time is 30 ms late, and the read says it can be: its bytes came
        # after the previous read (20 ms after the first write), so by up to ~50 ms; so can the
        # gaps ending at the second and the third be off (the first chunk's TTFT is exact)
        bins = dict(compiled.bounds())
        assert bins.pop(0) == 1 and sum(bins.values()) == 2
        (late,) = bins
        assert t_second - t_read <= late <= time.monotonic_ns() - t_read
        assert compiled.stamps() == {"kernel_receive": 2, "select_return": 0}  # the reads with chunks
        s.close()
        conn.read()
        assert codes[-1] == _hotpath.EOF
    finally:
        c.close()


def test_a_read_without_the_kernels_stamp_is_bounded_by_what_is_known():
    """The socket option on, but no stamp comes with the read (here: the option turned off
    after the reader asked for it): the chunk's time is the read's, 20 ms after the write, and
    its bound is not 0 but the time since the connection's previous read (what is known of when
    the bytes came); the read counts as timed at select(), not by the kernel."""
    c, s = _pair()
    try:
        rec = _record()
        conn, codes = _reader(rec, c.fileno())
        assert conn.stamped
        c.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 0)
        compiled.bounds(reset=True)
        compiled.stamps(reset=True)
        s.sendall(_HEAD)
        time.sleep(0.01)
        conn.read()
        event = b"data: " + _chunk(1) + b"\n\n"
        t_before = time.monotonic_ns()
        s.sendall(b"%x\r\n%s\r\n" % (len(event), event))
        time.sleep(0.02)
        conn.read()
        assert list(rec.chunk_usage) == [1] and rec.chunk_t_ns[0] >= t_before + 20_000_000
        # late by up to the time since the previous read: at least the 20 ms slept
        assert 20_000_000 <= rec.read_delay_ns <= time.monotonic_ns() - t_before + 10_000_000
        (late,) = dict(compiled.bounds())
        assert late >= 20_000_000
        assert compiled.stamps() == {"kernel_receive": 0, "select_return": 1}
        assert compiled.chunk_times(compiled.stamps()) == "select_return"
    finally:
        c.close()
        s.close()


def _raw_server(responses: list[bytes]):
    """A server on 127.0.0.1 that answers the k-th connection's request with responses[k] as
    given (then closes it): the HTTP framings a client must read, byte for byte."""
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve():
        for raw in responses:
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                try:
                    conn.sendall(raw)
                except OSError:
                    pass  # the client hung up first (a response it refused partway)
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/v1"


_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _sse_body() -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in [_chunk(1), _chunk(2, finish="stop"), b"[DONE]"])


@pytest.mark.parametrize(
    "name,raw,error",
    [
        ("no body", b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", "http_503"),
        (
            "chunked html",
            b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"13\r\n<h1>Internal</h1> x\r\n0\r\n\r\n",
            "http_500",
        ),
        ("json", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", "not_streaming"),
        ("close-delimited", b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + _sse_body(), None),
        (
            "content-length",
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(_sse_body())
            + _sse_body(),
            None,
        ),
        (
            "100 continue",
            b"HTTP/1.1 100 Continue\r\n\r\n"
            + b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + _sse_body(),
            None,
        ),
        ("closed at once", b"", "disconnected"),
        (
            "cut off",
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n" % (len(_sse_body()) - 14, _sse_body()[:-14]),
            "reset",
        ),
        ("not http", b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "connection_error"),
        # chunked framing as strict as aiohttp's parser: a size, optional spaces and ;extension, CRLF
        ("chunk extension", _CHUNKED + b"%x ;a=b\r\n%s\r\n0\r\n\r\n" % (len(_sse_body()), _sse_body()), None),
        (
            "empty size line",
            _CHUNKED + b"%x\r\n%s\r\n\r\n0\r\n\r\n" % (len(_sse_body()), _sse_body()),
            "connection_error",
        ),
        (
            "size then junk",
            _CHUNKED + b"%x zzz\r\n%s\r\n0\r\n\r\n" % (len(_sse_body()), _sse_body()),
            "connection_error",
        ),
        ("bare LF", _CHUNKED + b"%x\n%s\n0\n\n" % (len(_sse_body()), _sse_body()), "connection_error"),
        # the bare LFs llhttp lets pass: after chunk data (between two chunks) and ending the trailer
        (
            "data then LF",
            _CHUNKED
            + b"64\r\n%s\n%x\r\n%s\r\n0\r\n\r\n" % (_sse_body()[:100], len(_sse_body()) - 100, _sse_body()[100:]),
            None,
        ),
        ("trailer then LF", _CHUNKED + b"%x\r\n%s\r\n0\r\nX-T: 1\n\n" % (len(_sse_body()), _sse_body()), None),
    ],
)
@pytest.mark.parametrize("path", ["compiled", "python"])
def test_both_read_paths_read_each_framing_alike(name, raw, error, path):
    """Each way a response can be framed (or broken), read from a real socket by the compiled
    client and by the pure-Python one (aiohttp's parser): the same error type on both
    (docs/metrics.md, "Errors"), and quickly: a response that ends is never left to the
    request's timeout."""
    url = _raw_server([raw])
    t0 = time.monotonic()
    rec = _send(url, path)
    assert time.monotonic() - t0 < 5, name
    assert rec.error_type == error, (name, rec.error_message)
    if error is None:
        assert list(rec.chunk_usage) == [1, 2] and rec.finish_reason == "stop" and rec.done
    if error == "http_500":
        assert "Internal" in rec.error_message and "<" not in rec.error_message


def _send(url: str, path: str, timeout_s: float = 10.0) -> RequestRecord:
    """One streamed request on the compiled path or the pure-Python one (aiohttp)."""
    import asyncio

    from loadgen.client.stream import StreamClient, make_session

    async def one() -> RequestRecord:
        if path == "compiled":
            client = compiled.CompiledClient(url, "chat", {}, timeout_s=timeout_s)
            try:
                return await client.send(_record(), b'{"stream": true}')
            finally:
                await client.close()
        session = make_session(None)
        try:
            return await StreamClient(session, url, "chat", {}, timeout_s).send(_record(), b'{"stream": true}')
        finally:
            await session.close()

    return asyncio.run(one())


_NEVER_ENDS = """
import resource, sys
from tests.test_hotpath import _send
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rec = _send(sys.argv[1], sys.argv[2], timeout_s=60.0)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(rec.error_type, grew // 1024, rec.error_message)
"""


def test_the_compiled_client_keeps_its_connection_alive():
    """Two requests one after the other go over one connection (the server accepts only one)."""
    import asyncio

    body = _sse_body()
    resp = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    resp += b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    import threading

    def serve():
        conn, _ = srv.accept()
        with conn:
            for _ in range(2):
                conn.recv(65536)
                conn.sendall(resp)
            conn.recv(65536)  # until the client closes it
        srv.close()

    threading.Thread(target=serve, daemon=True).start()

    async def two() -> list[RequestRecord]:
        client = compiled.CompiledClient(f"http://127.0.0.1:{srv.getsockname()[1]}/v1", "chat", {}, 5.0)
        try:
            return [await client.send(_record(), b"{}") for _ in range(2)]
        finally:
            await client.close()

    recs = asyncio.run(two())
    assert [r.error_type for r in recs] == [None, None], [r.error_message for r in recs]
    assert all(list(r.chunk_usage) == [1, 2] for r in recs)


def test_a_negative_length_is_refused_with_its_exception():
    """Every error path of the C reader sets its exception: a body length below 0 (which the
    framing would otherwise take as bytes to read) is a ValueError, not a bare -1."""
    conn = _hotpath.Conn(-1, lambda code: None, None)
    with pytest.raises(ValueError, match="negative length -5"):
        conn.begin_body(_hotpath.LENGTH, -5, True)
