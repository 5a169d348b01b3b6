"""Per-request figures from raw records: one row per request, the stage between the client
and the summary. Definitions: docs/metrics.md."""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.client.record import RequestRecord
from loadgen.measures.steps import request_steps
from loadgen.measures.tokens import resolve

_NS_PER_MS = 1e6


def _row(rec: RequestRecord, tokenizer) -> dict:
    t, n, source = resolve(rec, tokenizer)
    tokens = int(n.sum())
    steps, steps_source = request_steps(t, n, counted_per_chunk=source == "continuous_usage")
    row = {
        "index": rec.index,
        "request_id": rec.request_id,
        "workload": rec.workload,
        "category": rec.category,
        "session": rec.session,
        "turn": rec.turn,
        "worker": rec.worker,
        "warmup": rec.warmup,
        "ok": rec.ok,
        "status": rec.status,
        "error_type": rec.error_type,
        "error_message": rec.error_message,
        "finish_reason": rec.finish_reason,
        "max_tokens": rec.max_tokens,
        "prompt_tokens": rec.prompt_tokens,
        "completion_tokens": rec.usage_completion_tokens if rec.usage_completion_tokens is not None else tokens,
        "token_count_source": source,
        "t_scheduled_ns": rec.t_scheduled_ns,
        "t_call_ns": rec.t_call_ns,
        "t_send_ns": rec.t_send_ns,
        "t_headers_ns": rec.t_headers_ns or None,
        "t_first_token_ns": int(t[0]) if len(t) else None,
        "t_last_token_ns": int(t[-1]) if len(t) else None,
        "t_end_ns": rec.t_end_ns,
        "queue_delay_ms": rec.queue_delay_ns / _NS_PER_MS,
        "lateness_ms": rec.lateness_ns / _NS_PER_MS,
        "read_delay_ms": rec.read_delay_ns / _NS_PER_MS,
        "n_chunks": len(t),
        "chunk_t_ns": t.tolist(),
        "chunk_tokens": n.tolist(),
        "step_tokens": steps,
        "steps_source": steps_source,
        "server_draft_tokens": rec.server_draft_tokens,
        "server_accepted_tokens": rec.server_accepted_tokens,
        "server_spec_steps": rec.server_spec_steps,
        # the server's per-request acceptance length (vLLM's mean_acceptance_length)
        "server_acceptance_length": (
            1 + rec.server_accepted_tokens / rec.server_spec_steps
            if rec.server_spec_steps and rec.server_accepted_tokens is not None
            else float("nan")
        ),
        "prompt_token_ids": rec.prompt_token_ids,
        "output_token_ids": rec.token_ids if rec.token_ids else None,
    }
    nan = float("nan")
    if len(t):
        ttft = (t[0] - rec.t_send_ns) / _NS_PER_MS
        e2e = (t[-1] - rec.t_send_ns) / _NS_PER_MS
        row.update(
            ttft_ms=ttft,
            e2e_ms=e2e,
            tpot_ms=(e2e - ttft) / (tokens - 1) if tokens > 1 else nan,
            ttft_from_scheduled_ms=(t[0] - rec.t_scheduled_ns) / _NS_PER_MS,
            e2e_from_scheduled_ms=(t[-1] - rec.t_scheduled_ns) / _NS_PER_MS,
            decode_tokens_per_chunk=float(n[1:].mean()) if len(n) > 1 else nan,
        )
    else:
        row.update(
            ttft_ms=nan,
            e2e_ms=nan,
            tpot_ms=nan,
            ttft_from_scheduled_ms=nan,
            e2e_from_scheduled_ms=nan,
            decode_tokens_per_chunk=nan,
        )
    return row


COLUMNS = list(_row(RequestRecord(0, "", False, 0), None).keys())


def request_frame(records: list[RequestRecord], tokenizer=None) -> pd.DataFrame:
    """One row per request (in send order), chunk times and tokens as list columns."""
    rows = [_row(r, tokenizer) for r in sorted(records, key=lambda r: r.index)]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for col in (
        "prompt_tokens",
        "status",
        "t_first_token_ns",
        "t_last_token_ns",
        "server_draft_tokens",
        "server_accepted_tokens",
        "server_spec_steps",
    ):
        frame[col] = frame[col].astype("Int64")
    return frame


def measured(frame: pd.DataFrame) -> pd.DataFrame:
    """The requests statistics are computed over: past warm-up, and successful."""
    return frame[frame["ok"] & ~frame["warmup"]]


def token_gaps(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled over the frame's requests: per-token ITL (ms), inter-chunk gaps (ms), and tokens
    in each decode chunk (every chunk after a request's first)."""
    itl, gaps, decode = [], [], []
    for t, n in zip(frame["chunk_t_ns"], frame["chunk_tokens"]):
        t = np.asarray(t, dtype=np.int64)
        n = np.asarray(n, dtype=np.int64)
        if len(t) == 0:
            continue
        g = np.diff(t) / _NS_PER_MS
        itl.append(np.zeros(int(n[0]) - 1))  # extra tokens of the first chunk came with it
        itl.append(np.repeat(g / n[1:], n[1:]))
        gaps.append(g)
        decode.append(n[1:])
    cat = lambda parts, dt: np.concatenate(parts) if parts else np.zeros(0, dt)  # noqa: E731
    return cat(itl, float), cat(gaps, float), cat(decode, np.int64)
