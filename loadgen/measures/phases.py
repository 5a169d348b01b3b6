"""A reasoning model's answer in its phases: thinking, then the answer (or a tool call), each
timed and counted apart. Definitions: docs/metrics.md, "Reasoning and tool calls"; the chunks'
phases come from the client (loadgen/client/phases.py)."""

from __future__ import annotations

import numpy as np

from loadgen.client.phases import REASONING, TOOL
from loadgen.client.record import RequestRecord

_NS_PER_MS = 1e6
# the frame's phase columns: counts (nullable integers) and times (floats)
COUNTS = (
    "reasoning_tokens",
    "answer_tokens",
    "tool_call_tokens",
    "reasoning_decode_chunks",
    "reasoning_decode_tokens",
    "answer_decode_chunks",
    "answer_decode_tokens",
)
TIMES = ("ttfr_ms", "ttfo_ms", "ttfo_from_scheduled_ms", "ttftc_ms", "tpot_reasoning_ms", "tpot_answer_ms")


def none(ttft_ms: float, ttft_from_scheduled_ms: float) -> dict:
    """A request without phases: its first output token is its first token."""
    out: dict = dict.fromkeys(COUNTS)
    out.update(dict.fromkeys(TIMES, float("nan")))
    out.update(ttfo_ms=ttft_ms, ttfo_from_scheduled_ms=ttft_from_scheduled_ms)
    return out


def figures(rec: RequestRecord, t_all: np.ndarray, n_all: np.ndarray, completion_tokens: int) -> dict:
    """The phase columns of a request whose record has phases; `t_all`, `n_all`: every
    recorded chunk's time and tokens (loadgen.measures.tokens.resolve_all)."""
    nan = float("nan")
    phase = np.frombuffer(rec.chunk_phase, dtype=np.int8)  # type: ignore[arg-type]
    keep = n_all > 0
    t, n, ph = t_all[keep], n_all[keep], phase[keep]
    if rec.reasoning_tokens is not None and (rec.reasoning_tokens > 0 or not (ph == REASONING).any()):
        # the server's count (vLLM's parser: the tokens between the markers); a parser that
        # cannot count reports 0 beside streamed thinking, and is not believed
        reasoning = int(rec.reasoning_tokens)
    else:
        reasoning = int(n[ph == REASONING].sum())
    out = none(nan, nan)
    out.update(reasoning_tokens=reasoning, answer_tokens=max(completion_tokens - reasoning, 0))
    if (ph == TOOL).any():
        out["tool_call_tokens"] = int(n[ph == TOOL].sum())
        out["ttftc_ms"] = (t[np.argmax(ph == TOOL)] - rec.t_send_ns) / _NS_PER_MS
    if not len(t):
        return out
    thinking = ph == REASONING
    s = 0  # the answer's first chunk: the first not thinking, after the first that is
    if thinking.any():
        first = int(np.argmax(thinking))
        out["ttfr_ms"] = (t[first] - rec.t_send_ns) / _NS_PER_MS
        rest = np.flatnonzero(~thinking[first:])
        s = first + int(rest[0]) if len(rest) else len(t)
    if s < len(t):
        out["ttfo_ms"] = (t[s] - rec.t_send_ns) / _NS_PER_MS
        out["ttfo_from_scheduled_ms"] = (t[s] - rec.t_scheduled_ns) / _NS_PER_MS
    r_span, a_span = int(n[:s].sum()), int(n[s:].sum())
    if s >= 1 and r_span > 1:
        out["tpot_reasoning_ms"] = (t[s - 1] - t[0]) / _NS_PER_MS / (r_span - 1)
    if s < len(t) and a_span > 1:
        out["tpot_answer_ms"] = (t[-1] - t[s]) / _NS_PER_MS / (a_span - 1)
    out.update(
        reasoning_decode_chunks=max(s - 1, 0),
        reasoning_decode_tokens=int(n[1:s].sum()),
        answer_decode_chunks=len(t) - max(s, 1),
        answer_decode_tokens=int(n[max(s, 1) :].sum()),
    )
    return out


def summary(rows, measured: np.ndarray) -> dict | None:
    """summary.json's `phases`: over the measured requests, the thinking and the answer apart
    (None when no measured request had phases: a run without reasoning or tool calls)."""
    from loadgen.measures.describe import describe

    if "reasoning_tokens" not in rows:
        return None
    has = ~np.isnan(rows.array("reasoning_tokens", float)) & measured
    if not has.any():
        return None

    def f(name: str, pick: np.ndarray = has) -> np.ndarray:
        return rows.array(name, float)[pick]

    def pooled(kind: str) -> float | None:
        chunks = np.nansum(f(f"{kind}_decode_chunks"))
        return float(np.nansum(f(f"{kind}_decode_tokens")) / chunks) if chunks else None

    reasoning = f("reasoning_tokens")
    tools = f("tool_call_tokens")
    return {
        "requests": int(has.sum()),
        "reasoning_requests": int((reasoning > 0).sum()),
        "tool_call_requests": int((~np.isnan(tools)).sum()),
        "answered": int((~np.isnan(f("ttfo_ms"))).sum()),
        "ttfr_ms": describe(f("ttfr_ms")),
        "ttfo_ms": describe(f("ttfo_ms", measured)),
        "ttfo_from_scheduled_ms": describe(f("ttfo_from_scheduled_ms", measured)),
        "ttftc_ms": describe(f("ttftc_ms")),
        "tpot_reasoning_ms": describe(f("tpot_reasoning_ms")),
        "tpot_answer_ms": describe(f("tpot_answer_ms")),
        "reasoning_tokens": describe(reasoning),
        "answer_tokens": describe(f("answer_tokens")),
        "tool_call_tokens": describe(tools[~np.isnan(tools)]),
        "tokens_per_chunk_reasoning": pooled("reasoning"),
        "tokens_per_chunk_answer": pooled("answer"),
    }
