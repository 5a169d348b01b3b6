"""vLLM-shaped OpenAI streaming chunks, rendered to SSE bytes.

Field order and content follow vLLM's `/v1/completions` and `/v1/chat/completions` streams:
one `data: {json}` event per engine step, optional `usage` on every chunk
(`continuous_usage_stats`), a usage-only chunk at the end (`include_usage`), then
`data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

DONE = b"data: [DONE]\n\n"
SYSTEM_FINGERPRINT = "loadgen-emulator"  # vLLM: "vllm-VERSION-HASH"; a string, as a client may read it
_dumps = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps' own encoder, without its lookups


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int | None = None) -> dict:
    """vLLM's usage object; with a reasoning parser (`reasoning_tokens` not None) it carries
    `completion_tokens_details.reasoning_tokens`, as vLLM 0.32's chat endpoint does."""
    out: dict = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return out


@dataclass(slots=True)
class StreamRenderer:
    """Renders the chunks of one streamed response. A content chunk's bytes are its request's
    fixed parts (rendered once) around the text and counts (`chunk`): the same bytes as
    rendering the whole object each time (`chunk_object`), at a fraction of the cost, which a
    server writing one chunk per request per engine step pays tens of thousands of times a
    second."""

    chat: bool
    request_id: str
    model: str
    created: int
    prompt_tokens: int
    continuous_usage: bool
    # vLLM's return_token_ids: the prompt's ids once (chat: on the role event, top level;
    # completions: on the first choice), each chunk's generated ids on its choice
    prompt_token_ids: list[int] | None = None
    return_token_ids: bool = False
    # logprobs asked for: (token ids, text, characters before it) -> the choice's `logprobs`
    logprobs: Callable[[list[int], str, int], dict] | None = None
    # a reasoning parser is set: usage carries completion_tokens_details.reasoning_tokens
    reasoning_details: bool = False
    # vLLM stamps system_fingerprint on the finish chunk when no usage chunk follows it
    finish_fingerprint: str | None = None
    _chars: int = 0  # text characters streamed so far (completions' text_offset)
    _parts: tuple | None = None  # the chunk template: before the text, between text and reason, ...

    def _base(self) -> dict:
        return {
            "id": self.request_id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
        }

    def _usage(self, completion_tokens: int, reasoning_tokens: int) -> dict:
        """The usage object; with a reasoning parser, its reasoning count too."""
        return usage(self.prompt_tokens, completion_tokens, reasoning_tokens if self.reasoning_details else None)

    def _chunk_usage(self, completion_tokens: int, reasoning_tokens: int) -> dict:
        """continuous_usage_stats' usage on a chunk: vLLM's chat chunks add completion_tokens_details."""
        u = self._usage(completion_tokens, reasoning_tokens)
        if self.chat:
            u.setdefault("completion_tokens_details", None)
        return u

    def role(self) -> bytes:
        """The chat stream's first event: the assistant role, no tokens."""
        payload = self._base()
        payload["choices"] = [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        ]
        if self.continuous_usage:
            payload["usage"] = self._chunk_usage(0, 0)
        payload["prompt_token_ids"] = (
            self.prompt_token_ids if self.return_token_ids else None
        )  # vLLM: null unless asked
        payload["prompt_text"] = None
        self.prompt_token_ids = None
        return sse(payload)

    def chunk(
        self,
        text: str,
        completion_tokens: int,
        finish_reason: str | None,
        token_ids: list[int] | None = None,
        reasoning_tokens: int = 0,
    ) -> bytes:
        """One engine step's tokens; `completion_tokens` is the running total after it."""
        if self.return_token_ids or self.logprobs is not None or self.reasoning_details:  # the whole object
            return self.chunk_object(text, completion_tokens, finish_reason, token_ids, reasoning_tokens)
        if finish_reason is not None and (self.chat or self.finish_fingerprint):  # vLLM: the finish chunk's own fields
            return self.chunk_object(text, completion_tokens, finish_reason, token_ids, reasoning_tokens)
        parts = self._parts
        if parts is None:
            parts = self._parts = self._template()
        head, mid, tail = parts
        reason = b"null" if finish_reason is None else _dumps(finish_reason).encode()
        out = head + _dumps(text).encode() + mid + reason + tail
        if self.continuous_usage:
            p = self.prompt_tokens
            out += b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%s}' % (
                p,
                p + completion_tokens,
                completion_tokens,
                b',"completion_tokens_details":null' if self.chat else b"",
            )
        return out + b"}\n\n"

    def _template(self) -> tuple[bytes, bytes, bytes]:
        """The chunk's bytes around the text and the finish reason, cut out of one rendering."""
        marker_text, marker_reason = "\x00TEXT\x00", "\x00REASON\x00"
        saved, self.continuous_usage = self.continuous_usage, False
        try:
            whole = self.chunk_object(marker_text, 0, marker_reason, finished=False).decode()
        finally:
            self.continuous_usage = saved
        head, rest = whole.split(_dumps(marker_text), 1)
        mid, tail = rest.split(_dumps(marker_reason), 1)
        assert tail.endswith("}\n\n")
        return head.encode(), mid.encode(), tail[: -len("}\n\n")].encode()

    def chunk_object(
        self,
        text: str,
        completion_tokens: int,
        finish_reason: str | None,
        token_ids: list[int] | None = None,
        reasoning_tokens: int = 0,
        finished: bool | None = None,
    ) -> bytes:
        """`chunk`, rendered from the whole object. As vLLM 0.32 writes it: a chat choice's
        `stop_reason` on its finish chunk only, a completion's on every chunk, `token_ids` (and a
        completion's `prompt_token_ids`) null unless return_token_ids asks for them."""
        payload = self._base()
        lp = None
        if self.logprobs is not None:
            lp = self.logprobs(token_ids or [], text, self._chars)
            self._chars += len(text)
        ids = (token_ids or []) if self.return_token_ids else None
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": lp, "finish_reason": finish_reason}
            if finish_reason is not None if finished is None else finished:
                choice["stop_reason"] = None
        else:
            choice = {"index": 0, "text": text, "logprobs": lp, "finish_reason": finish_reason, "stop_reason": None}
            choice["prompt_token_ids"] = self.prompt_token_ids  # the first chunk's, when asked for
            self.prompt_token_ids = None
        choice["token_ids"] = ids
        payload["choices"] = [choice]
        self._stamp(payload, finish_reason if finished is None else finished)
        if self.continuous_usage:
            payload["usage"] = self._chunk_usage(completion_tokens, reasoning_tokens)
        return sse(payload)

    def _stamp(self, payload: dict, finished) -> None:
        if finished and self.finish_fingerprint is not None:
            payload["system_fingerprint"] = self.finish_fingerprint

    def delta_chunk(
        self,
        delta: dict,
        completion_tokens: int,
        finish_reason: str | None,
        reasoning_tokens: int,
        token_ids: list[int] | None = None,
    ) -> bytes:
        """A chat chunk of a thinking or tool-calling answer: its `delta` as a reasoning or tool
        parser makes it (servers/emulator/chat.py)."""
        payload = self._base()
        choice: dict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        if finish_reason is not None:
            choice["stop_reason"] = None
        choice["token_ids"] = (token_ids or []) if self.return_token_ids else None
        payload["choices"] = [choice]
        self._stamp(payload, finish_reason)
        if self.continuous_usage:
            payload["usage"] = self._chunk_usage(completion_tokens, reasoning_tokens)
        return sse(payload)

    def final_usage(self, completion_tokens: int, metrics: dict | None = None, reasoning_tokens: int = 0) -> bytes:
        """The usage-only chunk; vLLM's per-request `metrics` ride on it (when it has any)."""
        payload = self._base()
        payload["choices"] = []
        payload["usage"] = self._usage(completion_tokens, reasoning_tokens)
        payload["system_fingerprint"] = SYSTEM_FINGERPRINT
        if metrics:
            payload["metrics"] = metrics
        return sse(payload)

    def extension(self, fields: dict) -> bytes:
        """A response-level extension chunk (no choices) before the usage chunk, as SGLang's
        server streams `sglext.spec_tokens_details` when a request asked for them."""
        payload = self._base()
        payload["choices"] = []
        payload.update(fields)
        return sse(payload)


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict:
    """OpenAI/vLLM error object, as returned with a 4xx/5xx status or as a stream event
    (`param`: the request field it is about, as vLLM names it)."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def prompt_text(body: dict, chat: bool) -> str | None:
    """The prompt of a completions body, or a chat body's messages joined (None if absent)."""
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return None
        parts = []
        for m in msgs:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, list):  # content parts
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            parts.append(c if isinstance(c, str) else "")
        return "\n".join(parts)
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1:
        p = p[0]
    return p if isinstance(p, str) else None
