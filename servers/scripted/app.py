"""The scripted server's endpoints: vLLM's OpenAI-compatible API, each chunk written at the
time its script says (absolute deadlines on a precise clock, so errors do not accumulate)."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass

from servers.clock import PreciseClock
from servers.http import HttpConnection, HttpRequest, models_list
from servers.openai_stream import DONE, StreamRenderer, error_body, prompt_text, sse, usage
from servers.scripted.script import Script, ScriptConfig, prompt_key, prompt_token_count, script_for

_HTML_500 = (
    b"<html><head><title>500 Internal Server Error</title></head>"
    b"<body><h1>Internal Server Error</h1><p>scripted fault</p></body></html>"
)
_MID_STREAM_FAULTS = ("reset", "stall", "malformed_sse", "invalid_json", "stream_error")


@dataclass(slots=True)
class ServerOptions:
    model: str = "scripted"
    api_key: str | None = None
    honour_usage: bool = True  # include_usage: a final usage chunk
    honour_continuous_usage: bool = True  # continuous_usage_stats: usage on every chunk
    trace_path: str | None = None  # JSONL: per request, scripted deadlines and write times
    metrics: bool = False  # serve /metrics with the time scale (only with --time-scale)


def _json(conn: HttpConnection, status: int, obj: dict, headers: dict | None = None) -> None:
    conn.respond(status, json.dumps(obj).encode(), "application/json", headers)


def _error(conn: HttpConnection, status: int, message: str, err_type: str) -> None:
    _json(conn, status, error_body(message, err_type, status))


class ScriptedServer:
    def __init__(self, cfg: ScriptConfig, opts: ServerOptions) -> None:
        self.cfg = cfg
        self.opts = opts
        self._arrivals = itertools.count()
        self._ids = itertools.count()
        self._trace = open(opts.trace_path, "a", buffering=1) if opts.trace_path else None
        self.clock = PreciseClock()

    def close(self) -> None:
        self.clock.close()
        if self._trace:
            self._trace.close()

    async def handle(self, req: HttpRequest, conn: HttpConnection) -> None:
        if req.path == "/health":
            conn.respond(200, b"")
            return
        if req.path == "/metrics" and self.opts.metrics:
            conn.respond(
                200,
                (
                    "# HELP emulator:time_scale Real seconds per scripted second.\n"
                    "# TYPE emulator:time_scale gauge\n"
                    f"emulator:time_scale {self.cfg.time_scale}\n"
                ).encode(),
                "text/plain; version=0.0.4",
            )
            return
        if (
            req.path.startswith("/v1/")
            and self.opts.api_key
            and req.headers.get("authorization") != f"Bearer {self.opts.api_key}"
        ):
            _json(conn, 401, {"error": "Unauthorized"})
            return
        if req.path == "/v1/models" and req.method == "GET":
            conn.respond(200, models_list(self.opts.model), "application/json")
        elif req.path in ("/v1/completions", "/v1/chat/completions") and req.method == "POST":
            await self._complete(req, conn, chat=req.path == "/v1/chat/completions")
        else:
            _error(conn, 404, f"no route {req.method} {req.path}", "NotFoundError")

    async def _complete(self, req: HttpRequest, conn: HttpConnection, chat: bool) -> None:
        try:
            body = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            return _error(conn, 400, "request body is not valid JSON", "BadRequestError")
        if not isinstance(body, dict):
            return _error(conn, 400, "request body must be a JSON object", "BadRequestError")
        if body.get("model") != self.opts.model:
            return _error(conn, 404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        text = prompt_text(body, chat)
        if text is None:
            return _error(conn, 400, f"'{'messages' if chat else 'prompt'}' is required", "BadRequestError")
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(conn, 400, "max_tokens must be a positive integer", "BadRequestError")

        fault = self.cfg.faults[next(self._arrivals) % len(self.cfg.faults)]
        if fault in ("http400_json", "http500_html", "http429", "disconnect") and self.cfg.fault_delay_ms:
            await asyncio.sleep(self.cfg.fault_delay_ms / 1e3 * self.cfg.time_scale)
        if fault == "http400_json":
            return _error(conn, 400, "scripted fault: bad request", "BadRequestError")
        if fault == "http500_html":
            return conn.respond(500, _HTML_500, "text/html")
        if fault == "http429":
            return _json(
                conn,
                429,
                error_body("scripted fault: rate limit exceeded", "RateLimitError", 429),
                {"Retry-After": "1"},
            )
        if fault == "disconnect":
            return conn.reset()

        script = script_for(self.cfg, text, max_tokens)
        opts = body.get("stream_options") or {}
        stream = bool(body.get("stream"))
        renderer = StreamRenderer(
            chat=chat,
            request_id=f"{'chatcmpl' if chat else 'cmpl'}-{next(self._ids)}",
            model=self.opts.model,
            created=int(time.time()),
            prompt_tokens=prompt_token_count(text),
            continuous_usage=stream
            and self.opts.honour_usage
            and self.opts.honour_continuous_usage
            and bool(opts.get("include_usage"))
            and bool(opts.get("continuous_usage_stats")),
        )
        if not stream:
            return await self._whole(req, conn, renderer, script, chat)
        final_usage = self.opts.honour_usage and bool(opts.get("include_usage"))
        # what the request asked of a sampler (the script ignores it): its --trace records it for tests
        sampling = {k: body[k] for k in ("temperature", "top_p", "top_k", "seed") if k in body}
        await self._stream(req, conn, renderer, script, fault, final_usage, chat, text, sampling)

    async def _whole(self, req, conn, renderer: StreamRenderer, script: Script, chat: bool) -> None:
        await self.clock.sleep_until(req.t_recv + script.offsets_s()[-1])
        text = "".join(" " + w for w in script.words[: script.completion_tokens])
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            if chat
            else {"index": 0, "text": text, "finish_reason": "length"}
        )
        _json(
            conn,
            200,
            {
                "id": renderer.request_id,
                "object": "chat.completion" if chat else "text_completion",
                "created": renderer.created,
                "model": renderer.model,
                "choices": [choice],
                "usage": usage(renderer.prompt_tokens, script.completion_tokens),
            },
        )

    async def _stream(
        self,
        req,
        conn: HttpConnection,
        renderer: StreamRenderer,
        script: Script,
        fault: str,
        final_usage: bool,
        chat: bool,
        text: str,
        sampling: dict,
    ) -> None:
        conn.start_stream()
        if chat:
            conn.write_chunk(renderer.role())  # vLLM sends the role first, with no tokens
        tokens = () if fault == "empty" else script.tokens
        offsets = script.offsets_s()
        per_write = self.cfg.events_per_write
        deadlines, writes = [], []
        pending: list[bytes] = []
        done = 0
        for i, n in enumerate(tokens):
            if i == self.cfg.fault_after_chunks and fault in _MID_STREAM_FAULTS:
                if pending:
                    conn.write_chunk(b"".join(pending))
                if await self._mid_stream_fault(conn, fault):
                    return
                pending = []
            piece = "".join(" " + w for w in script.words[done : done + n])
            done += n
            last = i == len(tokens) - 1
            pending.append(renderer.chunk(piece, done, "length" if last else None))
            if len(pending) < per_write and not last:
                continue
            deadline = req.t_recv + offsets[i]
            await self.clock.sleep_until(deadline)
            if conn.closed:
                return
            conn.write_chunk(pending[0] if len(pending) == 1 else b"".join(pending))
            pending = []
            if self._trace:
                deadlines.append(int(deadline * 1e9))
                writes.append(time.monotonic_ns())
            await conn.drain()
        tail = renderer.final_usage(done) if final_usage else b""
        conn.write_chunk(tail if fault == "missing_done" else tail + DONE)
        conn.end_stream()
        if self._trace:
            self._trace.write(
                json.dumps(
                    {
                        "id": renderer.request_id,
                        "key": prompt_key(text),
                        "t_recv_ns": int(req.t_recv * 1e9),
                        "deadline_ns": deadlines,
                        "write_ns": writes,
                        "sampling": sampling,
                    }
                )
                + "\n"
            )

    async def _mid_stream_fault(self, conn: HttpConnection, fault: str) -> bool:
        """Inject a fault; True when the response is over."""
        if fault == "reset":
            conn.reset()
            return True
        if fault == "stall":
            await asyncio.sleep(self.cfg.stall_s)
            return True
        if fault == "stream_error":
            conn.write_chunk(sse(error_body("scripted fault: engine failed", "InternalServerError", 500)) + DONE)
            conn.end_stream()
            return True
        conn.write_chunk(
            b"this line is not server-sent events\n\n"
            if fault == "malformed_sse"
            else b'data: {"id":"x","choices":[{"index":0,"text":"cut\n\n'
        )
        return False
