"""What one SSE data event of an OpenAI-compatible stream means for the request's record.

A chunk carrying `usage` is read with a regex for its cumulative `completion_tokens`: exact,
because in valid JSON the bytes `"completion_tokens":` can only be a key (quotes inside strings
are escaped), and that count is all a usage-counted chunk needs. Every other event (no usage,
an error key, a payload not framed as an object, or a run keeping text for a tokenizer) is
parsed as JSON.
"""

from __future__ import annotations

import json
import re

from loadgen.client import phases
from loadgen.client.record import RequestRecord
from loadgen.client.sse import StreamFault
from servers import engines

_loads = json.loads
_TAGS = re.compile(r"<[^>]+>")
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":\s*(\d+)')
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens":\s*(\d+)')
_FINISH = re.compile(rb'"finish_reason":\s*"([^"]*)"')
_NO_CHOICES = re.compile(rb'"choices":\s*\[\s*\]')


def _keys(which: str) -> re.Pattern[bytes]:
    """A regex for any dialect's per-request SD key `which` (servers/engines/dialect.py:
    `request_sd`) and its integer value."""
    names = sorted({k for sd in engines.request_sd_keys() if (k := getattr(sd, which))}, key=len, reverse=True)
    return re.compile(rb'"(?:' + b"|".join(re.escape(n.encode()) for n in names) + rb')":\s*(\d+)')


# per-request speculative-decoding counts, each dialect's keys (vLLM's `speculative_decoding`, ...);
# a payload holding one of MARKS (each dialect's drafted key) is read in full for them
_DRAFTED, _ACCEPTED, _SPEC_STEPS = _keys("drafted"), _keys("accepted"), _keys("steps")
_PER_STEP = re.compile(
    rb'"(?:'
    + b"|".join(re.escape(k.encode()) for k in sorted({sd.per_step for sd in engines.request_sd_keys() if sd.per_step}))
    + rb')":\s*\[([\d,\s]*)\]'
)
MARKS = tuple(m.encode() for m in engines.marks())
_marked = re.compile(b"|".join(re.escape(m) for m in MARKS) or rb"(?!)").search  # one pass over the payload


def on_events(rec: RequestRecord, payloads: list[bytes], t: int) -> None:
    """Record the events of one socket read, which arrived at `t` (monotonic ns).

    The hot path, for a read of usage-counted chunks (continuous usage): the whole read is
    checked at once, in C (the payloads joined: one regex pass for the counts, substring tests
    for anything unusual), so an event costs a fraction of a microsecond. A read that holds
    anything else (an error, no usage, a usage-only chunk, per-request draft counts, text kept
    for a tokenizer) goes event by event through `on_event`, which reads each in full; so does a
    read of one event, for which that costs less."""
    usages = rec.chunk_usage
    done = bool(payloads) and payloads[-1] == b"[DONE]"
    body = payloads[:-1] if done else payloads
    if (
        len(body) > 1
        and not rec.done
        and rec.chunk_text is None
        and rec.token_ids is None
        and not (usages and usages[-1] < 0)
    ):
        if _all_counted(rec, body, t):
            body = []
        elif _all_counted(rec, body[:-1], t):
            body = body[-1:]  # e.g. the final usage-only chunk: read in full below
    for payload in body:
        on_event(rec, payload, t)
    if done:
        on_event(rec, b"[DONE]", t)


def _all_counted(rec: RequestRecord, body: list[bytes], t: int) -> bool:
    """Record `body` if every event in it is a token chunk with one cumulative
    `completion_tokens` and nothing else to read; False (and nothing recorded) if not."""
    joined = b"\n".join(body)
    if b"[]" in joined or b'"error"' in joined or _marked(joined):
        return False
    marked = phases.has_marks(joined)
    reasoning: list[int] | None = None
    if marked:  # a reasoning model's or a tool call's chunks: one reasoning count each, or none
        reasoning = phases.counts_of(joined)
        if reasoning and len(reasoning) != len(body):
            return False
    cums = _COMPLETION_TOKENS.findall(joined)
    # as many counts as events, each event an object: one usage per chunk (a chunk has one
    # `usage` object, and a key appears once in a JSON object)
    if len(cums) != len(body) or not all(p[:1] == b"{" and p[-1:] == b"}" for p in body):
        return False
    _on_counted(rec, body, joined, cums, t, reasoning if marked else None)
    return True


def _on_counted(
    rec: RequestRecord, body: list[bytes], joined: bytes, cums: list[bytes], t: int, reasoning: list[int] | None
) -> None:
    """Every event of `body` is a chunk with one cumulative `completion_tokens` (in `cums`);
    `reasoning` not None: the read may hold phases (loadgen/client/phases.py), and these are its
    reasoning counts, one an event (or none at all)."""
    usages = rec.chunk_usage
    if rec.prompt_tokens is None and (m := _PROMPT_TOKENS.search(body[0])):
        rec.prompt_tokens = int(m[1])
    if joined.count(b'"finish_reason":null') != len(body) and (f := _FINISH.findall(joined)):
        rec.finish_reason = f[-1].decode()
    last = usages[-1] if usages else 0
    counts = [int(c) for c in cums]
    rec.usage_completion_tokens = counts[-1]
    if reasoning is not None:  # a chunk's phase is noted as it is kept
        for i, (payload, cum) in enumerate(zip(body, counts)):
            if cum > last:
                rec.chunk_t_ns.append(t)
                usages.append(cum)
                rec.chunk_chars.append(-1)
                phases.from_bytes(rec, payload, reasoning[i] if reasoning else None)
                last = cum
        return
    if all(a < b for a, b in zip([last, *counts], counts)):  # the usual case: every event counts
        usages.extend(counts)
        rec.chunk_t_ns.extend([t] * len(counts))
        rec.chunk_chars.extend([-1] * len(counts))  # not read: the usage makes the count exact
        return
    for cum in counts:
        if cum > last:
            rec.chunk_t_ns.append(t)
            usages.append(cum)
            rec.chunk_chars.append(-1)
            last = cum


def on_event(rec: RequestRecord, payload: bytes, t: int) -> None:
    """Record one event's payload, which arrived at `t` (monotonic ns)."""
    if rec.done:
        return  # anything after [DONE] is ignored
    if payload == b"[DONE]":
        rec.done = True
        rec.t_end_ns = t
        return
    if (
        rec.chunk_text is None
        and rec.token_ids is None
        and payload[:1] == b"{"
        and payload[-1:] == b"}"
        and b'"error"' not in payload
    ):
        m = _COMPLETION_TOKENS.search(payload)
        if m is not None:
            _on_usage_chunk(rec, payload, int(m.group(1)), t)
            return
    _on_parsed(rec, _parse(payload), t)
    if _marked(payload):
        _spec_counts(rec, payload)


def _spec_counts(rec: RequestRecord, payload: bytes) -> None:
    if (d := _DRAFTED.search(payload)) and (a := _ACCEPTED.search(payload)):
        rec.server_draft_tokens, rec.server_accepted_tokens = int(d.group(1)), int(a.group(1))
        if s := _SPEC_STEPS.search(payload):
            rec.server_spec_steps = int(s.group(1))
        if p := _PER_STEP.search(payload):
            rec.server_step_accepted = [int(v) for v in p.group(1).split(b",") if v.strip()]


def _counts(usages, cum: int) -> bool:
    """Whether a chunk's cumulative usage `cum` says it carried tokens: only while every chunk
    so far had usage. After chunks without, a usage is the final total (llama.cpp puts it on
    its last, text-less chunk), not this chunk's tokens."""
    return cum > (usages[-1] if usages else 0) and (not usages or usages[-1] >= 0)


def _on_usage_chunk(rec: RequestRecord, payload: bytes, cum: int, t: int) -> None:
    usages = rec.chunk_usage
    if usages and usages[-1] < 0:  # the final usage after chunks without: read the chunk whole
        _on_parsed(rec, _parse(payload), t)
        _spec_counts(rec, payload)
        return
    rec.usage_completion_tokens = cum
    if _marked(payload):
        _spec_counts(rec, payload)
    if rec.prompt_tokens is None and (m := _PROMPT_TOKENS.search(payload)):
        rec.prompt_tokens = int(m.group(1))
    if m := _FINISH.search(payload):
        rec.finish_reason = m.group(1).decode()
    marked = phases.has_marks(payload)
    if _NO_CHOICES.search(payload):
        if marked:
            phases.final_count(rec, payload)
        return  # a usage-only chunk (the final one): no tokens of its own
    if _counts(usages, cum):
        rec.chunk_t_ns.append(t)
        usages.append(cum)
        rec.chunk_chars.append(-1)  # not read: the usage makes the count exact
        if marked or rec.chunk_phase is not None:
            phases.from_bytes(rec, payload)


def _parse(payload: bytes) -> dict:
    try:
        obj = _loads(payload)
    except ValueError:
        raise StreamFault("invalid_json", f"data event is not JSON: {payload[:80]!r}") from None
    if not isinstance(obj, dict):
        raise StreamFault("invalid_json", f"data event is not a JSON object: {payload[:80]!r}")
    if "error" in obj or obj.get("object") == "error":
        raise StreamFault("stream_error", error_message(obj))
    return obj


def _on_parsed(rec: RequestRecord, obj: dict, t: int) -> None:
    cum = -1
    usage = obj.get("usage")
    if usage:
        ct = usage.get("completion_tokens")
        if isinstance(ct, int):
            cum = ct
            rec.usage_completion_tokens = ct
        pt = usage.get("prompt_tokens")
        if isinstance(pt, int):
            rec.prompt_tokens = pt
    choices = obj.get("choices")
    if rec.token_ids is not None:
        _token_ids(rec, obj, choices[0] if choices else None)
    reasoning = phases.reasoning_count(usage)
    if not choices:
        if reasoning is not None:
            rec.reasoning_tokens = reasoning
        return
    choice = choices[0]
    if fr := choice.get("finish_reason"):
        rec.finish_reason = fr
    text = choice.get("text")
    delta = choice.get("delta") if text is None else None
    if text is None:
        text = _delta_text(delta)
    chars = len(text) if text else 0
    usages = rec.chunk_usage
    if chars or _counts(usages, cum):
        rec.chunk_t_ns.append(t)
        usages.append(cum)
        rec.chunk_chars.append(chars)
        if rec.chunk_text is not None:
            rec.chunk_text.append(text or "")
        if delta or reasoning is not None or rec.chunk_phase is not None:
            phases.from_delta(rec, delta, reasoning)
    elif reasoning is not None:
        rec.reasoning_tokens = reasoning


def _token_ids(rec: RequestRecord, obj: dict, choice: dict | None) -> None:
    """vLLM's return_token_ids: the prompt's ids once (chat: top level of the first event;
    completions: on the first choice), every chunk's generated ids on its choice."""
    if rec.prompt_token_ids is None:
        ids = obj.get("prompt_token_ids") or (choice or {}).get("prompt_token_ids")
        if isinstance(ids, list):
            rec.prompt_token_ids = ids
    if choice and isinstance(ids := choice.get("token_ids"), list) and rec.token_ids is not None:
        rec.token_ids.extend(ids)


def _delta_text(delta) -> str:
    """All generated text in a chat delta: reasoning, content and tool-call arguments."""
    if not delta:
        return ""
    text = delta.get("reasoning_content") or delta.get("reasoning") or ""
    if content := delta.get("content"):
        text += content
    for call in delta.get("tool_calls") or ():
        fn = call.get("function") or {}
        text += (fn.get("name") or "") + (fn.get("arguments") or "")
    return text


def page_text(text: str) -> str:
    """An error page's words: its tags stripped, its whitespace collapsed."""
    return " ".join(_TAGS.sub(" ", text).split())


def error_message(obj: dict) -> str:
    """The message of an OpenAI/vLLM error object (`{"error": {...}}` or the older flat form)."""
    err = obj.get("error", obj)
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or err)
    return str(err)
