"""Per-request figures from raw records: one row per request, the stage between the client
and the summary. Definitions: docs/metrics.md."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from loadgen.client.columnar import decoded, flat, records_batch, records_of
from loadgen.client.record import RequestRecord
from loadgen.measures import phases
from loadgen.measures.steps import request_steps
from loadgen.measures.tokens import resolve_all

_NS_PER_MS = 1e6


def _row(rec: RequestRecord, tokenizer) -> dict:
    t_all, n_all, source = resolve_all(rec, tokenizer)
    keep = n_all > 0
    t, n = t_all[keep], n_all[keep]
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
        "server_step_accepted": rec.server_step_accepted,
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
        row.update(phases.none(row["ttft_ms"], row["ttft_from_scheduled_ms"]))
    else:
        row.update(
            ttft_ms=nan,
            e2e_ms=nan,
            tpot_ms=nan,
            ttft_from_scheduled_ms=nan,
            e2e_from_scheduled_ms=nan,
            decode_tokens_per_chunk=nan,
        )
        row.update(phases.none(nan, nan))
    if rec.chunk_phase is not None:
        row.update(phases.figures(rec, t_all, n_all, row["completion_tokens"]))
    return row


COLUMNS = list(_row(RequestRecord(0, "", False, 0), None).keys())
_NULLABLE = (
    "prompt_tokens",
    "status",
    "t_headers_ns",
    "t_first_token_ns",
    "t_last_token_ns",
    "server_draft_tokens",
    "server_accepted_tokens",
    "server_spec_steps",
    *phases.COUNTS,
)
_STRINGS = (
    "request_id",
    "workload",
    "category",
    "session",
    "error_type",
    "error_message",
    "finish_reason",
    "token_count_source",
    "steps_source",
)
_BOOLS = ("warmup", "ok")
_INT_LISTS = (
    "chunk_t_ns",
    "chunk_tokens",
    "step_tokens",
    "prompt_token_ids",
    "output_token_ids",
    "server_step_accepted",
)
_FLOATS = (
    "queue_delay_ms",
    "lateness_ms",
    "read_delay_ms",
    "server_acceptance_length",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "ttft_from_scheduled_ms",
    "e2e_from_scheduled_ms",
    "decode_tokens_per_chunk",
    *phases.TIMES,
)


def _arrow_type(name: str) -> pa.DataType:
    if name in _STRINGS:
        return pa.string()
    if name in _BOOLS:
        return pa.bool_()
    if name in _INT_LISTS:
        return pa.list_(pa.int64())
    if name in _FLOATS:
        return pa.float64()
    return pa.int64()


def _pandas_metadata(schema: pa.Schema) -> dict:
    """pandas' own metadata for a frame of this schema, so that pandas reads requests.parquet
    back with the frame's dtypes (nullable integers as Int64) however it was written."""
    sample = pd.DataFrame({f.name: pd.Series([], dtype=_dtype(f.name)) for f in schema})
    return pa.Schema.from_pandas(sample, preserve_index=False).metadata


def _dtype(name: str) -> str:
    if name in _NULLABLE:
        return "Int64"
    if name in _STRINGS or name in _INT_LISTS:
        return "object"
    if name in _BOOLS:
        return "bool"
    if name in _FLOATS:
        return "float64"
    return "int64"


_BARE = pa.schema([pa.field(name, _arrow_type(name)) for name in COLUMNS])
SCHEMA = _BARE.with_metadata(_pandas_metadata(_BARE))  # the request frame as Arrow (requests.parquet)


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each list's sum, from the flat values and the list offsets (empty lists: 0)."""
    run = np.concatenate([[0], np.cumsum(values)])
    return run[offsets[1:]] - run[offsets[:-1]]


def _per_usage(batch: pa.RecordBatch) -> pa.Table:
    """The frame rows of records whose every chunk carried cumulative usage (vLLM's continuous
    usage, the emulator): the same figures `_row` computes, for a whole batch at once."""
    tv, offsets = flat(batch.column("chunk_t_ns"))
    uv, _ = flat(batch.column("chunk_usage"))
    starts = offsets[:-1]
    tok = np.diff(uv, prepend=np.int64(0))
    tok[starts[starts < len(tok)]] = uv[starts[starts < len(tok)]]
    keep = tok > 0
    count = _segment_sums(keep.astype(np.int64), offsets)
    off = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
    t, n = tv[keep], tok[keep]
    total = _segment_sums(n, off)
    has = count > 0
    first_i, last_i = off[:-1][has], off[1:][has] - 1
    col = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in ("t_send_ns", "t_scheduled_ns")}
    nan = np.full(batch.num_rows, np.nan)
    t_first = np.zeros(batch.num_rows, np.int64)
    t_last = np.zeros(batch.num_rows, np.int64)
    t_first[has], t_last[has] = t[first_i], t[last_i]
    ttft, e2e, tpot, ttft_s, e2e_s, per_chunk = (nan.copy() for _ in range(6))
    ttft[has] = (t_first[has] - col["t_send_ns"][has]) / _NS_PER_MS
    e2e[has] = (t_last[has] - col["t_send_ns"][has]) / _NS_PER_MS
    many = has & (total > 1)
    tpot[many] = (e2e[many] - ttft[many]) / (total[many] - 1)
    ttft_s[has] = (t_first[has] - col["t_scheduled_ns"][has]) / _NS_PER_MS
    e2e_s[has] = (t_last[has] - col["t_scheduled_ns"][has]) / _NS_PER_MS
    n_first = np.zeros(batch.num_rows, np.int64)
    n_first[has] = n[first_i]
    decode = has & (count > 1)
    per_chunk[decode] = (total[decode] - n_first[decode]).astype(float) / (count[decode] - 1)
    lists = pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), pa.array(t))
    tokens = pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), pa.array(n))
    usage = batch.column("usage_completion_tokens")
    completion = np.where(usage.is_null().to_numpy(zero_copy_only=False), total, usage.fill_null(0).to_numpy())
    return _table(
        batch,
        {
            "completion_tokens": completion,
            "token_count_source": np.full(batch.num_rows, "continuous_usage"),
            "t_first_token_ns": pa.array(t_first, mask=~has),
            "t_last_token_ns": pa.array(t_last, mask=~has),
            "n_chunks": count,
            "chunk_t_ns": lists,
            "chunk_tokens": tokens,
            "step_tokens": tokens,  # a chunk per step where the server counted every chunk (steps.py)
            "steps_source": np.where(has, "chunks", "none"),
            "ttft_ms": ttft,
            "e2e_ms": e2e,
            "tpot_ms": tpot,
            "ttft_from_scheduled_ms": ttft_s,
            "e2e_from_scheduled_ms": e2e_s,
            "decode_tokens_per_chunk": per_chunk,
            # no phases here (frame_table sends records with phases through _row)
            **{name: pa.nulls(batch.num_rows, pa.int64()) for name in phases.COUNTS},
            **{name: nan.copy() for name in phases.TIMES},
            "ttfo_ms": ttft,
            "ttfo_from_scheduled_ms": ttft_s,
        },
    )


def _table(batch: pa.RecordBatch, derived: dict) -> pa.Table:
    """The frame's columns: the record's own fields as they are, the times' simple figures,
    and `derived` (what depends on the chunks' tokens)."""
    c = {name: batch.column(name) for name in batch.schema.names}
    np_ = lambda name: c[name].to_numpy(zero_copy_only=False)  # noqa: E731
    send, sched, queue = np_("t_send_ns"), np_("t_scheduled_ns"), np_("queue_delay_ns")
    headers = np_("t_headers_ns")
    accepted, steps = c["server_accepted_tokens"], c["server_spec_steps"]
    with_steps = steps.is_valid().to_numpy(zero_copy_only=False) & accepted.is_valid().to_numpy(zero_copy_only=False)
    with_steps &= steps.fill_null(0).to_numpy() != 0
    length = np.full(batch.num_rows, np.nan)
    length[with_steps] = 1 + accepted.fill_null(0).to_numpy()[with_steps] / steps.fill_null(1).to_numpy()[with_steps]
    token_ids = c["token_ids"]
    own = {
        "index": c["index"],
        "request_id": c["request_id"],
        "workload": c["workload"],
        "category": c["category"],
        "session": c["session"],
        "turn": c["turn"],
        "worker": c["worker"],
        "warmup": c["warmup"],
        "ok": c["error_type"].is_null(),
        "status": c["status"],
        "error_type": c["error_type"],
        "error_message": c["error_message"],
        "finish_reason": c["finish_reason"],
        "max_tokens": c["max_tokens"],
        "prompt_tokens": c["prompt_tokens"],
        "t_scheduled_ns": c["t_scheduled_ns"],
        "t_call_ns": c["t_call_ns"],
        "t_send_ns": c["t_send_ns"],
        "t_headers_ns": pa.array(headers, mask=headers == 0),
        "t_end_ns": c["t_end_ns"],
        "queue_delay_ms": queue / _NS_PER_MS,
        "lateness_ms": (send - sched - queue) / _NS_PER_MS,
        "read_delay_ms": np_("read_delay_ns") / _NS_PER_MS,
        "server_draft_tokens": c["server_draft_tokens"],
        "server_accepted_tokens": accepted,
        "server_spec_steps": steps,
        "server_step_accepted": c["server_step_accepted"],
        "server_acceptance_length": length,
        "prompt_token_ids": c["prompt_token_ids"],
        "output_token_ids": pa.array([ids if ids else None for ids in token_ids.to_pylist()], pa.list_(pa.int64()))
        if token_ids.null_count < len(token_ids)
        else token_ids,
    }
    own.update(derived)
    return pa.Table.from_arrays([_as(own[f.name], f.type) for f in _BARE], schema=SCHEMA)


def _as(values, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if values.type == kind else values.cast(kind)
    return pa.array(values, kind)


def frame_table(batch: pa.RecordBatch, tokenizer=None) -> pa.Table:
    """The request frame's rows (requests.parquet's form) of a batch of records (decoded:
    loadgen.client.columnar), in the batch's order. Records whose every chunk carried
    cumulative usage are computed for the whole batch at once; the rest (final usage only, a
    tokenizer, no chunks) one by one through `_row`, which defines every figure."""
    if batch.num_rows == 0:
        return SCHEMA.empty_table()
    _, offsets = flat(batch.column("chunk_t_ns"))
    uv, u_offsets = flat(batch.column("chunk_usage"))
    lengths = np.diff(offsets)
    same = np.array_equal(offsets, u_offsets)
    fast = np.zeros(batch.num_rows, bool)
    if same and len(uv):
        negative = _segment_sums((uv < 0).astype(np.int64), offsets.astype(np.int64))
        fast = (lengths > 0) & (negative == 0)
        if "chunk_phase" in batch.schema.names:
            fast &= batch.column("chunk_phase").is_null().to_numpy(zero_copy_only=False)
    if fast.all():
        return _per_usage(batch)
    parts, order = [], []
    if fast.any():
        idx = np.flatnonzero(fast)
        parts.append(_per_usage(batch.take(pa.array(idx))))
        order.append(idx)
    idx = np.flatnonzero(~fast)
    rows = [_row(rec, tokenizer) for rec in records_of(batch.take(pa.array(idx)))]
    parts.append(pa.Table.from_pylist(rows, schema=SCHEMA))
    order.append(idx)
    table = pa.concat_tables(parts)
    return table.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """The frame's Arrow rows as the request frame (nullable integers as Int64, lists as
    arrays)."""
    frame = table.to_pandas()
    for name in _NULLABLE:
        if name in frame:
            frame[name] = frame[name].astype("Int64") if frame[name].dtype != "Int64" else frame[name]
    return frame


def request_frame(records: list[RequestRecord], tokenizer=None) -> pd.DataFrame:
    """One row per request (in send order), chunk times and tokens as list columns."""
    ordered = sorted(records, key=lambda r: (r.index, r.turn))
    return to_pandas(frame_table(decoded(records_batch(ordered)), tokenizer))


def token_gaps(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled over the frame's requests: per-token ITL (ms), inter-chunk gaps (ms), and tokens
    in each decode chunk (every chunk after a request's first). The definition, request by
    request, in one array each: the summary computes the same in batches
    (loadgen.measures.chunks), which tests/test_measure.py holds to this."""
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
