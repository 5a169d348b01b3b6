"""vLLM's OpenAI-compatible API over the emulated engine: /v1/completions and
/v1/chat/completions (streaming: one SSE chunk per engine step; or whole; logprobs emulated),
/v1/models, /tokenize, /detokenize, /health and /metrics. Bad request bodies get vLLM's JSON errors."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
import uuid

from servers import engines
from servers.emulator import chat as chatting
from servers.emulator import parity
from servers.emulator.content import chat_prompt
from servers.emulator.engine import Emission, EngineError
from servers.emulator.metrics import CONTENT_TYPE, render
from servers.emulator.realtime import RealtimeDriver
from servers.emulator.timeline import TimeScaleError
from servers.http import HttpConnection, HttpRequest
from servers.openai_stream import DONE, SYSTEM_FINGERPRINT, StreamRenderer, error_body, usage

log = logging.getLogger("loadgen.emulator")


class BadRequest(ValueError):
    """A refused request, as vLLM answers it: `param` names the field (vLLM's `error.param`)."""

    def __init__(
        self, message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.err_type, self.param = status, err_type, param


def invalid(field: str, kind: str, msg: str, value) -> BadRequest:
    """A body field of the wrong type, as vLLM's request model (pydantic) refuses it: type
    "Bad Request", param `body.FIELD`, the validation error as the message."""
    shown = value if isinstance(value, (str, int, float, bool)) or value is None else f"<{type(value).__name__}>"
    detail = {"type": kind, "loc": f"body.{field}", "msg": msg, "input": shown}
    return BadRequest(f"1 validation error:\n  {detail}", 400, "Bad Request", f"body.{field}")


def _json(conn: HttpConnection, status: int, obj) -> None:
    conn.respond(status, json.dumps(obj).encode(), "application/json")


def _number(body: dict, key: str, lo: float | None = None, hi: float | None = None):
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise invalid(key, "float_parsing", "Input should be a valid number", v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise BadRequest(f"{key} must be in [{lo}, {hi}], got {v}. (parameter={key}, value={v})", param=key)
    return v


def _int(body: dict, key: str, lo: int):
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(key, "int_parsing", "Input should be a valid integer", v)
    if v < lo:
        raise BadRequest(f"{key} must be at least {lo}, got {v}. (parameter={key}, value={v})", param=key)
    return v


def _prompt(body: dict, chat: bool) -> tuple[str, dict | None]:
    """The request's prompt as the emulator's words read it, and what the model's own tokenizer
    counts of it (serve --tokenizer): the messages and tools, or the prompt's text; None for a
    prompt given as token ids (one word each: already the model's count)."""
    if chat:
        msgs = body.get("messages")
        if (
            not isinstance(msgs, list)
            or not msgs
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in msgs)
        ):
            if msgs is None:
                raise invalid("messages", "missing", "Field required", f"<dict of {len(body)} items>")
            raise BadRequest("messages must be a non-empty list of {role, content} objects", param="messages")
        return chatting.tools_text(body) + chat_prompt(msgs), {"messages": msgs, "tools": body.get("tools")}
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return " ".join(f"t{t}" for t in prompt), None  # token ids: one token each
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("prompt must be a non-empty string (one prompt per request)")
    return prompt, {"prompt": prompt}


class EmulatorAPI:
    def __init__(
        self,
        driver: RealtimeDriver,
        served: list[str],
        model: str,
        registry,
        api_key: str | None = None,
        crash_after: int | None = None,
        log_requests: bool = False,
        max_log_len: int | None = None,
        chunk_log=None,
        step_log=None,
        stream_interval: int = 1,
        dialect=None,
    ) -> None:
        self.dialect = dialect or engines.dialect(str(engines.get(engines.emulator()).dialect))  # --flavor
        self.stream_interval = stream_interval  # --stream-interval: the least a request's field may ask
        self.chunk_log = chunk_log  # --chunk-log: a file each streamed response's chunks go to
        self.step_log = step_log  # --step-log: a file each request's engine steps go to
        self.driver = driver
        self.log_requests = log_requests  # vLLM's --enable-log-requests: each prompt as received
        self.max_log_len = max_log_len
        self.crash_after = crash_after  # fault injection: die on request crash_after + 1
        self.served = served
        self.model = model
        self.registry = registry
        self.api_key = api_key
        self.created = int(time.time())
        self._ids = itertools.count()
        self._requests = itertools.count()

    def _permission(self) -> dict:
        """vLLM's ModelPermission, with its defaults."""
        return {
            "id": f"modelperm-{uuid.uuid4().hex[:16]}",
            "object": "model_permission",
            "created": self.created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }

    async def handle(self, req: HttpRequest, conn: HttpConnection) -> None:
        path = req.path
        if path == "/health":
            return conn.respond(200, b"")
        if path == self.dialect.metrics_path and req.method == "GET":
            return conn.respond(200, render(self.registry), CONTENT_TYPE)
        if (
            path.startswith(("/v1/", "/emulator/"))
            and self.api_key
            and req.headers.get("authorization") != f"Bearer {self.api_key}"
        ):
            return _json(conn, 401, {"error": "Unauthorized"})
        if path == "/emulator/clock":
            return self._clock(req, conn)
        if path in ("/tokenize", "/detokenize") and req.method == "POST":
            try:
                body = json.loads(req.body)
                if path == "/tokenize":
                    return _json(conn, 200, parity.tokenize_response(body, self.driver.engine.max_model_len))
                return _json(conn, 200, parity.detokenize_response(body))
            except (ValueError, UnicodeDecodeError, parity.ParityError) as e:
                return _json(conn, 400, error_body(str(e), "BadRequestError", 400))
        if path == "/v1/models" and req.method == "GET":
            return _json(
                conn,
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": name,
                            "object": "model",
                            "created": self.created,
                            "owned_by": self.dialect.owned_by or self.dialect.name,
                            "root": self.model,
                            "parent": None,
                            "max_model_len": self.driver.engine.max_model_len,
                            "permission": [self._permission()],
                        }
                        for name in self.served
                    ],
                },
            )
        if path in ("/v1/completions", "/v1/chat/completions") and req.method == "POST":
            if self.crash_after is not None and next(self._requests) >= self.crash_after:
                log.error("--exit-after-requests %d: crashing", self.crash_after)
                logging.shutdown()
                os._exit(70)
            try:
                return await self._complete(req, conn, chat=path.endswith("chat/completions"))
            except BadRequest as e:
                return _json(conn, e.status, error_body(str(e), e.err_type, e.status, e.param))
        _json(conn, 404, error_body(f"Not Found: {req.method} {path}", "NotFoundError", 404))

    def _clock(self, req: HttpRequest, conn: HttpConnection) -> None:
        """The emulated GPU's clock. POST {"time_scale": S}: run at S (at once when idle, else from
        the next step on; loadgen sweep sets each load level's scale this way). GET: the scale,
        and the counters a time-scale probe reads, cheaper than /metrics (docs/emulator.md)."""
        if req.method == "POST":
            try:
                body = json.loads(req.body)
                # None (not an object) is refused by set_time_scale, in its words
                scale = self.driver.set_time_scale(body["time_scale"] if isinstance(body, dict) else None)  # type: ignore[arg-type]
            except (ValueError, KeyError, UnicodeDecodeError, TimeScaleError) as e:
                return _json(
                    conn, 400, error_body(f'give {{"time_scale": S}} with S a number > 0 ({e})', "BadRequestError", 400)
                )
            return _json(conn, 200, {"time_scale": scale})
        if req.method != "GET":
            return _json(conn, 405, error_body("use GET or POST", "MethodNotAllowed", 405))
        s = self.driver.engine.stats
        _json(
            conn,
            200,
            {
                "time_scale": self.driver.time_scale,
                "modeled_seconds": s.modeled_seconds,
                "lost_seconds": s.lost_seconds,
                "steps": s.steps,
                "cpu_seconds": time.process_time(),
            },
        )

    def _parse(self, req: HttpRequest, chat: bool) -> dict:
        try:
            body = json.loads(req.body)
        except (ValueError, UnicodeDecodeError) as e:
            at = getattr(e, "pos", 0)  # vLLM (pydantic): the character where decoding failed
            detail = {
                "type": "json_invalid",
                "loc": f"body.{at}",
                "msg": "JSON decode error",
                "input": "<dict of 0 items>",
            }
            raise BadRequest(f"1 validation error:\n  {detail}", 400, "Bad Request", f"body.{at}") from None
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        if body.get("model") not in self.served:
            raise BadRequest(
                f"The model `{body.get('model')}` does not exist. Valid aliases: {', '.join(self.served)}.",
                404,
                "NotFoundError",
                "model",
            )
        text, counted = _prompt(body, chat)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise invalid("stream", "bool_parsing", "Input should be a valid boolean", stream)
        opts = body.get("stream_options")
        if opts is not None and not stream:
            raise BadRequest(
                "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
                param="stream_options",
            )
        if opts is not None and not isinstance(opts, dict):
            raise BadRequest("stream_options must be an object")
        max_tokens = _int(body, "max_tokens", 1)
        if max_tokens is None and chat:
            max_tokens = _int(body, "max_completion_tokens", 1)
        min_tokens = _int(body, "min_tokens", 0)
        _number(body, "temperature", 0.0, 2.0)
        _number(body, "top_p", 0.0, 1.0)
        if _int(body, "n", 1) not in (None, 1):
            raise BadRequest("n must be 1: the emulator returns one choice per request")
        if max_tokens is not None and min_tokens is not None and min_tokens > max_tokens:
            raise BadRequest(f"min_tokens ({min_tokens}) must be <= max_tokens ({max_tokens})")
        ignore_eos = body.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise invalid("ignore_eos", "bool_parsing", "Input should be a valid boolean", ignore_eos)
        return_ids = body.get("return_token_ids", False)
        if not isinstance(return_ids, bool):
            raise invalid("return_token_ids", "bool_parsing", "Input should be a valid boolean", return_ids)
        interval = _int(body, "stream_interval", 1)
        try:
            logprobs = parity.requested(body, chat)
            reasoning = chat and self.driver.engine.cfg.reasoning
            think = chat and chatting.thinks(body, reasoning)
            budget = chatting.thinking_budget(body) if think else None
            tool = chatting.tool_choice(body, self.driver.engine.cfg.tool_calls) if chat else None
        except (parity.ParityError, chatting.ChatError) as e:
            raise BadRequest(str(e)) from None
        return {
            "reasoning": reasoning,
            "think": think,
            "budget": budget,
            "tool": tool,
            "model": body["model"],
            "text": text,
            "prompt_tokens": self._count(counted),
            "stream": stream,
            "opts": opts or {},
            "logprobs": logprobs,
            "max_tokens": max_tokens,
            "min_tokens": min_tokens,
            "ignore_eos": ignore_eos,
            "return_token_ids": return_ids,
            # a dialect whose requests ask for their SD details (SGLang's): where, and whether asked
            "request_sd": self.dialect.request_sd if self._asked(body) else None,
            "alone": self.dialect.request_sd is not None and self.dialect.request_sd.alone,
            "stream_interval": max(interval or 1, self.stream_interval),  # vLLM: clamped to the server's
        }

    def _asked(self, body: dict) -> bool:
        sd = self.dialect.request_sd
        return sd is not None and sd.alone and all(body.get(k) == v for k, v in self.dialect.request_fields.items())

    def _count(self, what: dict | None) -> int | None:
        """The prompt's tokens by the model's own tokenizer (serve --tokenizer), else None."""
        tokens = self.driver.engine.tokens
        if tokens is None or what is None:
            return None
        try:
            return tokens.count(**what)
        except Exception as e:  # a template that refuses these messages: vLLM answers 400 too
            raise BadRequest(f"the chat template cannot render this request: {e}") from None

    async def _complete(self, req: HttpRequest, conn: HttpConnection, chat: bool) -> None:
        p = self._parse(req, chat)
        engine = self.driver.engine
        max_tokens = p["max_tokens"]
        if max_tokens is None:  # vLLM: 16 for completions, the rest of the context for chat
            max_tokens = max(1, engine.max_model_len - len(p["text"].split())) if chat else 16
        # vLLM: the client's X-Request-Id, if it sent one, names the request (serving.py _base_request_id)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{req.headers.get('x-request-id') or uuid.uuid4().hex[:16]}"
        done = asyncio.get_running_loop().create_future()
        state: dict = {}
        sink = (
            self._stream_sink(conn, chat, rid, p, state, done, self.chunk_log, self.step_log)
            if p["stream"]
            else self._whole_sink(state, done)
        )
        try:
            seq = self.driver.submit(
                rid,
                p["text"],
                max_tokens,
                ignore_eos=p["ignore_eos"],
                min_tokens=p["min_tokens"],
                sink=sink,
                think=p["think"],
                thinking_budget=p["budget"],
                tool=p["tool"],
                max_tokens_param=p["max_tokens"],
                prompt_tokens=p["prompt_tokens"],
            )
        except EngineError as e:
            raise BadRequest(str(e)) from None
        state["seq"] = seq
        if self.log_requests:  # vLLM logs the prompt at DEBUG, the rest at INFO; here both at INFO
            log.info(
                "Request %s details: prompt: %r, prompt_token_ids: %s.",
                rid,
                p["text"][: self.max_log_len],
                seq.prompt[: self.max_log_len],
            )
            log.info("Received request %s: max_tokens: %d, ignore_eos: %s.", rid, max_tokens, p["ignore_eos"])
        if p["stream"]:
            conn.start_stream()
        try:
            await done
        except asyncio.CancelledError:  # the client went away: free its slot, as vLLM aborts
            self.driver.abort(seq)
            raise
        if not p["stream"]:
            text = "".join(" " + w for w in state["words"])
            if chat and (seq.reasoning_end or seq.tool_call):
                msg = chatting.message(seq)
            else:
                msg = {"role": "assistant", "content": text}
            whole = whole_response(rid, chat, p, seq, state["words"], msg if chat else text)
            if self.step_log is not None:
                log_steps(self.step_log, rid, seq)
            _json(conn, 200, whole)

    @staticmethod
    def _whole_sink(state: dict, done: asyncio.Future):
        words: list[str] = []
        state["words"] = words

        def sink(em: Emission) -> None:
            words.extend(em.words)
            if em.finished and not done.done():
                done.set_result(None)

        return sink

    @staticmethod
    def _stream_sink(
        conn: HttpConnection, chat: bool, rid: str, p: dict, state: dict, done: asyncio.Future, log=None, steps_log=None
    ):  # log: the --chunk-log file; steps_log: the --step-log file
        include_usage = bool(p["opts"].get("include_usage"))
        continuous = include_usage and bool(p["opts"].get("continuous_usage_stats"))
        renderer: list[StreamRenderer] = []
        written: list | None = [] if log is not None else None
        last = [chatting.ANSWER]  # the phase of the last chunk with text: a chunk without inherits it

        interval = p.get("stream_interval", 1)
        held: list[Emission] = []  # steps' outputs not sent yet (stream_interval, a reader behind)
        chunks = [0]  # token-carrying chunks written so far (the step log's chunk numbers)
        unsent: list[int] = []  # steps whose tokens no chunk carried yet (a parser holding them back)
        waiting: list[asyncio.Task] = []

        async def when_writable() -> None:  # the reader caught up: what was held goes as one chunk
            await conn.drain()
            waiting.clear()
            if held and not conn.closed:
                write(_merged(held))

        def sink(em: Emission) -> None:
            if interval > 1:  # vLLM: send the first output, the last, and then every `interval` tokens
                if renderer and not em.finished and sum(len(h.tokens) for h in held) + len(em.tokens) < interval:
                    held.append(em)
                    return
            if not conn.writable:  # vLLM's output collector merges the outputs its handler has not sent
                held.append(em)
                if not waiting:
                    waiting.append(asyncio.get_running_loop().create_task(when_writable()))
                return
            if held:
                held.append(em)
                em = _merged(held)
            write(em)

        def write(em: Emission) -> None:
            seq = em.seq
            if not renderer:  # first output: vLLM sends the role first (chat), then content
                renderer.append(_renderer(chat, rid, p, seq, continuous, include_usage))
                if chat:
                    conn.write_chunk(renderer[0].role())
            r = renderer[0]
            finish = seq.finish_reason if em.finished else None
            phase = chatting.ANSWER
            if seq.reasoning_end or seq.tool_call is not None:
                d, seen = chatting.delta(seq, em.start, em.words, em.tokens)
                phase = last[0] = last[0] if seen is None else seen
                out = r.delta_chunk(d, seq.emitted, finish, seq.reasoning_tokens, em.tokens) if d or finish else b""
            else:
                text = "".join(" " + w for w in em.words)
                out = r.chunk(text, seq.emitted, finish, em.tokens, seq.reasoning_tokens)
            if em.finished:
                out += _ending(r, seq, p, include_usage)
            if written is not None and out:
                written.append((time.monotonic_ns(), seq.emitted, seq.reasoning_tokens, phase))
            if seq.steps is not None and em.tokens:
                unsent.extend(em.steps)
                if out:  # the chunk that carries them
                    for i in unsent:
                        seq.steps[i][3] = chunks[0]
                    unsent.clear()
                    chunks[0] += 1
            if out:
                conn.write_chunk(out)
            if written is not None and em.finished:
                record = {"id": rid, "prompt_tokens": len(seq.prompt), "completion_tokens": seq.emitted}
                record.update(reasoning_tokens=seq.reasoning_tokens, finish_reason=seq.finish_reason, chunks=written)
                log.write(json.dumps(record, separators=(",", ":")) + "\n")
                log.flush()
            if em.finished:
                if steps_log is not None:
                    log_steps(steps_log, rid, seq)
                conn.end_stream()
                if not done.done():
                    done.set_result(None)

        return sink


def _renderer(chat: bool, rid: str, p: dict, seq, continuous: bool, include_usage: bool) -> StreamRenderer:
    return StreamRenderer(
        chat=chat,
        request_id=rid,
        model=p["model"],
        created=int(time.time()),
        prompt_tokens=len(seq.prompt),
        continuous_usage=continuous,
        prompt_token_ids=list(seq.prompt) if p["return_token_ids"] else None,
        return_token_ids=p["return_token_ids"],
        reasoning_details=p.get("reasoning", False),
        finish_fingerprint=None if include_usage else SYSTEM_FINGERPRINT,
        logprobs=None
        if p["logprobs"] is None
        else (lambda ids, text, at: parity.block(ids, text.split(" ")[1:], p["logprobs"], chat, at)),
    )


def _merged(held: list[Emission]) -> Emission:
    """The held steps' outputs as one (emptying `held`), as vLLM's output collector merges them."""
    em = Emission(
        held[-1].seq,
        [t for h in held for t in h.tokens],
        [w for h in held for w in h.words],
        held[-1].finished,
        held[0].start,
        tuple(i for h in held for i in h.steps),
    )
    held.clear()
    return em


def log_steps(out, rid: str, seq) -> None:
    """The request's line in the --step-log: what the engine did for it, step by step, written by
    the server (not by any reader of its stream): [drafts verified, accepted, tokens emitted, the
    stream chunk that carried them (0 the first; -1 not streamed)], the prefill's step first."""
    record = {
        "id": rid,
        "finish_reason": seq.finish_reason,
        "prompt_tokens": len(seq.prompt),
        "completion_tokens": seq.emitted,
        "steps": seq.steps or [],
    }
    out.write(json.dumps(record, separators=(",", ":")) + "\n")
    out.flush()


def _ending(r, seq, p: dict, include_usage: bool) -> bytes:
    """What ends a stream after its last tokens: vLLM's per-request metrics on the usage
    chunk (none without include_usage), or a dialect's details in a chunk of their own before
    it (when asked for), then [DONE]."""
    if p["alone"]:
        out = r.extension(details(seq, p["request_sd"])) if seq.sd is not None and p["request_sd"] else b""
        return out + (r.final_usage(seq.emitted, None, seq.reasoning_tokens) if include_usage else b"") + DONE
    metrics = {"speculative_decoding": seq.sd.to_dict()} if seq.sd is not None else None
    return (r.final_usage(seq.emitted, metrics, seq.reasoning_tokens) if include_usage else b"") + DONE


def details(seq, sd) -> dict:
    """A request's SD counts in a dialect's words (`sd`: its RequestSD), nested at its path:
    the drafts proposed, those accepted, every decoding step a verification (and what the
    dialect says beside them, from these and k: `sd.more`)."""
    steps = seq.sd.decode_steps
    counts = {
        "drafted": seq.sd.num_draft_tokens,
        "k": seq.sd.num_spec_tokens,
        "accepted": sum(j * c for j, c in enumerate(seq.sd.histogram)),
        "steps": steps,
        "emitted": seq.emitted,
        "histogram": list(seq.sd.histogram),
    }
    obj: dict = {sd.drafted: counts["drafted"], sd.accepted: counts["accepted"]}
    if sd.steps:
        obj[sd.steps] = steps
    if sd.more is not None:
        obj.update(sd.more(counts))
    for key in reversed(sd.path):
        obj = {key: obj}
    return obj


def whole_response(rid: str, chat: bool, p: dict, seq, words: list[str], answer) -> dict:
    """A response when not streaming, as vLLM 0.32 writes one: every field its response model
    has, null where it has no value (servers/conformance.py compares them with real vLLM)."""
    ids = list(seq.output[: seq.emitted]) if p["return_token_ids"] else None
    lp = None if p["logprobs"] is None else parity.block(seq.output[: seq.emitted], words, p["logprobs"], chat)
    if chat:
        msg = {"role": "assistant", "content": None, **answer}
        for k in ("refusal", "annotations", "audio", "function_call", "reasoning"):
            msg.setdefault(k, None)
        choice: dict = {"index": 0, "message": msg, "logprobs": lp, "finish_reason": seq.finish_reason}
    else:
        choice = {"index": 0, "text": answer, "logprobs": lp, "finish_reason": seq.finish_reason}
    choice.update(stop_reason=None, token_ids=ids)
    if not chat:
        choice.update(prompt_logprobs=None, prompt_token_ids=list(seq.prompt) if ids is not None else None)
    choice["routed_experts"] = None
    u = usage(len(seq.prompt), seq.emitted, seq.reasoning_tokens if p["reasoning"] else None)
    u = {**u, "prompt_tokens_details": None, "completion_tokens_details": u.get("completion_tokens_details")}
    whole: dict = {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": p["model"],
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": u,
    }
    if chat:
        whole.update(
            prompt_logprobs=None, prompt_token_ids=list(seq.prompt) if ids is not None else None, prompt_text=None
        )
    whole.update(kv_transfer_params=None, ec_transfer_params=None)
    if seq.sd is not None and p.get("alone"):  # asked for, at the response's level (SGLang's)
        if p["request_sd"]:
            whole.update(details(seq, p["request_sd"]))
    elif seq.sd is not None:  # --per-request-spec-decode-metrics: on the response, as vLLM
        sd = seq.sd.to_dict()
        sd.setdefault("per_step_accepted", None)
        sd.setdefault("per_step_drafted", None)
        timing = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second")
        whole["metrics"] = {**dict.fromkeys(timing), "speculative_decoding": sd}
    return whole
