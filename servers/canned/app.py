"""Canned chunks at a set pace, or as fast as the client takes them.

Every response is pre-rendered once per shape (endpoint, length, usage options) as vLLM would
stream it, one token per event, and framed for HTTP chunked encoding, so serving costs a socket
write per `events_per_write` events and nothing else: the server stays far faster than the
client it is measuring. Event i of a response is due at `t_recv + ttft + i x pacing`; a write
goes out when its last event is due. Paced writes of all streams share one precise timer
(servers.clock) and run as callbacks, with no task per write. Unpaced, a response's writes go
back to back, waiting only for the socket (the client's reading sets the rate).

The trace (JSONL, one line per response) is the ground truth: when the request's first byte
arrived, when each write was due and when it went out, and how many events it carried.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from itertools import accumulate

from servers.clock import PreciseClock
from servers.http import HttpConnection, HttpRequest, frame_chunk, models_list
from servers.openai_stream import DONE, StreamRenderer, error_body, prompt_text
from servers.scripted.script import prompt_key

_TERMINATOR = b"0\r\n\r\n"


@dataclass(slots=True)
class CannedOptions:
    model: str = "canned"
    ttft_ms: float = 0.0
    pacing_ms: float = 0.0  # time between events; 0: as fast as the client reads
    events_per_write: int = 1
    trace_path: str | None = None

    def __post_init__(self) -> None:
        if self.events_per_write < 1:
            raise ValueError("--events-per-write must be at least 1")
        if self.ttft_ms < 0 or self.pacing_ms < 0:
            raise ValueError("--ttft-ms and --pacing-ms must not be negative")


def render(
    chat: bool, n: int, per_write: int, model: str, continuous: bool, final_usage: bool
) -> list[tuple[bytes, int]]:
    """One response of n one-token events as (framed write, token events in it); the last
    write also carries the final usage chunk (if asked for), [DONE] and the chunked terminator."""
    r = StreamRenderer(
        chat=chat, request_id="cmpl-canned", model=model, created=0, prompt_tokens=16, continuous_usage=continuous
    )
    events = [r.chunk(" tok", i + 1, "length" if i == n - 1 else None) for i in range(n)]
    writes = []
    for j in range(0, n, per_write):
        part = b"".join(events[j : j + per_write])
        if j == 0 and chat:
            part = r.role() + part
        last = j + per_write >= n
        if last:
            part += (r.final_usage(n) if final_usage else b"") + DONE
        writes.append((frame_chunk(part) + (_TERMINATOR if last else b""), min(per_write, n - j)))
    return writes


class CannedServer:
    def __init__(self, opts: CannedOptions) -> None:
        self.opts = opts
        self.clock = PreciseClock()
        self._cache: dict[tuple, list[tuple[bytes, int]]] = {}
        self._trace = open(opts.trace_path, "a") if opts.trace_path else None

    def close(self) -> None:
        self.clock.close()
        if self._trace:
            self._trace.close()

    async def handle(self, req: HttpRequest, conn: HttpConnection) -> None:
        if req.path == "/health":
            return conn.respond(200, b"")
        if req.path == "/v1/models" and req.method == "GET":
            return conn.respond(200, models_list(self.opts.model), "application/json")
        chat = req.path == "/v1/chat/completions"
        if req.method != "POST" or not (chat or req.path == "/v1/completions"):
            return _error(conn, 404, f"no route {req.method} {req.path}")
        try:
            body = json.loads(req.body)
            text = prompt_text(body, chat)
            n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        except (ValueError, TypeError, AttributeError):
            return _error(conn, 400, "request body is not a JSON object with a prompt and max_tokens")
        if text is None or n < 1 or not body.get("stream"):
            return _error(conn, 400, "the canned server only streams: give a prompt, max_tokens >= 1 and stream: true")
        so = body.get("stream_options") or {}
        key = (
            chat,
            n,
            bool(so.get("include_usage")) and bool(so.get("continuous_usage_stats")),
            bool(so.get("include_usage")),
        )
        writes = self._cache.get(key)
        if writes is None:
            writes = self._cache[key] = render(chat, n, self.opts.events_per_write, self.opts.model, key[2], key[3])
        conn.start_stream()
        t0 = req.t_recv + self.opts.ttft_ms / 1e3
        due = [t0 + (last - 1) * self.opts.pacing_ms / 1e3 for last in accumulate(e for _, e in writes)]
        if self.opts.pacing_ms > 0:
            written = await self._paced(conn, writes, due)
        else:
            written = await self._unpaced(conn, writes, t0)
        if self._trace:
            self._trace.write(
                json.dumps(
                    {
                        "key": prompt_key(text),
                        "t_recv_ns": int(req.t_recv * 1e9),
                        "events": [e for _, e in writes[: len(written)]],
                        "write_ns": written,
                        "due_ns": [int(d * 1e9) for d in due[: len(written)]],
                    }
                )
                + "\n"
            )

    async def _unpaced(self, conn: HttpConnection, writes, t0: float) -> list[int]:
        await self.clock.sleep_until(t0)
        written = []
        for data, _ in writes:
            if conn.closed:
                break
            conn.write_framed(data)
            written.append(time.monotonic_ns())
            await conn.drain()
        return written

    def _paced(self, conn: HttpConnection, writes, due: list[float]) -> asyncio.Future:
        """Each write as a timer callback at its due time; the future ends with the stream."""
        done = asyncio.get_running_loop().create_future()
        written: list[int] = []

        def step() -> None:
            if done.done():  # the handler was cancelled (the client went away)
                return
            if conn.closed:
                return done.set_result(written)
            conn.write_framed(writes[len(written)][0])
            written.append(time.monotonic_ns())
            if len(written) == len(writes):
                return done.set_result(written)
            self.clock.call_at(due[len(written)], step)

        self.clock.call_at(due[0], step)
        return done


def _error(conn: HttpConnection, status: int, message: str) -> None:
    conn.respond(status, json.dumps(error_body(message, "BadRequestError", status)).encode(), "application/json")
