"""Which phase of a reasoning model's or tool-calling answer each chunk belongs to.

vLLM with `--reasoning-parser` streams a model's thinking as the delta's `reasoning` (vLLM 0.32;
`reasoning_content` before it, and llama.cpp's server with `--reasoning-format` still), its
answer as `content`, and with `--tool-call-parser` a tool call as `tool_calls` deltas; with a
reasoning parser its usage carries `completion_tokens_details.reasoning_tokens` (cumulative on
every chunk with continuous usage). A chunk's phase: tool call if it carries one, else answer if
it carries answer text (the chunk where thinking ends and the answer begins is the answer's
first), else reasoning if it carries thinking; a chunk with no text (its tokens the parser's
hidden markers) keeps the phase of the chunk before it.

A record keeps phases only once a chunk is not plain answer or the server counts reasoning
tokens above 0 (`RequestRecord.chunk_phase`, `chunk_reasoning`); a stream without reasoning or
tool calls keeps none, and its figures are computed exactly as before.

The hot path reads raw bytes: a key is matched only where JSON allows a key (after `{` or `,`),
so the same words inside a string (where a quote is escaped) never count.
"""

from __future__ import annotations

import re
from array import array

from loadgen.client.record import RequestRecord

ANSWER, REASONING, TOOL = 0, 1, 2

_MARK = re.compile(rb'"(?:reasoning|reasoning_content|reasoning_tokens|tool_calls)"\s*:')
_REASONING_TEXT = re.compile(rb'[{,]\s*"(?:reasoning|reasoning_content)"\s*:\s*"(?!")')
_CONTENT_TEXT = re.compile(rb'[{,]\s*"content"\s*:\s*"(?!")')
_TOOL_CALL = re.compile(rb'[{,]\s*"tool_calls"\s*:\s*\[\s*\{')
_REASONING_TOKENS = re.compile(rb'"reasoning_tokens"\s*:\s*(\d+)')


def has_marks(data: bytes) -> bool:
    """Whether these bytes may hold a phase: a reasoning or tool-call key, or a reasoning count."""
    return (b'"reasoning' in data or b'"tool_calls"' in data) and _MARK.search(data) is not None


def note(rec: RequestRecord, phase: int | None, reasoning: int | None) -> None:
    """The phase and cumulative reasoning count of the chunk just appended to `rec`."""
    if reasoning is not None:
        rec.reasoning_tokens = reasoning
    phases = rec.chunk_phase
    if phase is None:  # no text: the phase goes on
        phase = phases[-1] if phases else ANSWER
    if phases is None:
        if phase == ANSWER and not reasoning:
            return
        before = len(rec.chunk_t_ns) - 1
        phases = rec.chunk_phase = array("b", bytes(before))
        rec.chunk_reasoning = array("q", [0 if reasoning is not None else -1]) * before
    phases.append(phase)
    rec.chunk_reasoning.append(-1 if reasoning is None else reasoning)  # type: ignore[union-attr]


def from_bytes(rec: RequestRecord, payload: bytes, reasoning: int | None = None) -> None:
    """A usage-counted chunk (read as bytes, not parsed): its phase from its delta's keys;
    `reasoning`: its reasoning count where the caller found it already."""
    if reasoning is None and (m := _REASONING_TOKENS.search(payload)):
        reasoning = int(m.group(1))
    note(rec, phase_of(payload), reasoning)


def _text_after(payload: bytes, key: bytes) -> bool:
    i = payload.find(key)
    return i >= 0 and payload[i + len(key) : i + len(key) + 1] != b'"'


def phase_of(payload: bytes) -> int | None:
    """A chunk's phase from its bytes. Compact JSON (vLLM's, no space after a colon) is read
    with substring tests: `"content":"` cannot occur inside a string, whose quotes are escaped
    (`\\"content\\":\\"`); any other JSON with the regexes, which match a key only after `{` or `,`."""
    if b'": ' not in payload:
        if b'"tool_calls":[{' in payload:
            return TOOL
        if _text_after(payload, b'"content":"'):
            return ANSWER
        if _text_after(payload, b'"reasoning":"') or _text_after(payload, b'"reasoning_content":"'):
            return REASONING
        return None
    if _TOOL_CALL.search(payload):
        return TOOL
    if _CONTENT_TEXT.search(payload):
        return ANSWER
    if _REASONING_TEXT.search(payload):
        return REASONING
    return None


def counts_of(joined: bytes) -> list[int]:
    """Every reasoning count in a read's joined events, in order."""
    return [int(c) for c in _REASONING_TOKENS.findall(joined)]


def final_count(rec: RequestRecord, payload: bytes) -> None:
    """The usage-only chunk at the end: the server's reasoning count for the whole answer."""
    if m := _REASONING_TOKENS.search(payload):
        rec.reasoning_tokens = int(m.group(1))


def reasoning_count(usage) -> int | None:
    """`completion_tokens_details.reasoning_tokens` of a parsed usage object, if any."""
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    n = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def from_delta(rec: RequestRecord, delta, reasoning: int | None) -> None:
    """A parsed chunk: its phase from its delta; the answer's text and the tool calls kept
    where the record keeps text (a conversation sends them back in its next turn)."""
    delta = delta if isinstance(delta, dict) else {}
    calls = delta.get("tool_calls")
    content = delta.get("content")
    if calls:
        phase: int | None = TOOL
    elif content:
        phase = ANSWER
    elif delta.get("reasoning") or delta.get("reasoning_content"):
        phase = REASONING
    else:
        phase = None
    if rec.chunk_text is not None:
        if content:
            (rec.answer_text if rec.answer_text is not None else _set(rec, "answer_text", [])).append(content)
        if calls:
            _merge_calls(rec, calls)
    note(rec, phase, reasoning)


def _set(rec: RequestRecord, name: str, value):
    setattr(rec, name, value)
    return value


def _merge_calls(rec: RequestRecord, calls) -> None:
    """Streamed tool-call deltas merged by index: the id, the name, the arguments' pieces."""
    out = rec.tool_calls if rec.tool_calls is not None else _set(rec, "tool_calls", [])
    for call in calls:
        if not isinstance(call, dict):
            continue
        i = call.get("index", len(out))
        while len(out) <= i:
            out.append({"id": None, "name": "", "arguments": ""})
        fn = call.get("function") or {}
        if call.get("id"):
            out[i]["id"] = call["id"]
        out[i]["name"] += fn.get("name") or ""
        out[i]["arguments"] += fn.get("arguments") or ""
