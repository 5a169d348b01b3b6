"""Request records as Arrow columns: the form the journal writes (loadgen.outputs.journal) and
the request frame is computed from (loadgen.measures.frame), batch by batch, without a Python
object per request.

`chunk_t_ns` and `chunk_usage` are list columns; in the journal's form ("encoded") each list
holds differences (each value minus the one before it, the first as it is), which compress
where absolute nanoseconds do not; `decoded` turns a batch back to values."""

from __future__ import annotations

from array import array
from dataclasses import fields

import numpy as np
import pyarrow as pa

from loadgen.client.record import RequestRecord

_DELTA = ("chunk_t_ns", "chunk_usage")  # stored as differences within the list
_INT_LISTS = ("chunk_t_ns", "chunk_usage", "chunk_chars")
_OPTIONAL_LISTS = {
    "chunk_text": pa.list_(pa.string()),
    "chunk_phase": pa.list_(pa.int8()),
    "chunk_reasoning": pa.list_(pa.int64()),
    "prompt_token_ids": pa.list_(pa.int64()),
    "token_ids": pa.list_(pa.int64()),
    "server_step_accepted": pa.list_(pa.int64()),
}
_TRANSIENT = ("answer_text", "tool_calls")  # needed while the run goes on, never journaled
_PHASES = ("chunk_phase", "chunk_reasoning")
_FIELDS = [f.name for f in fields(RequestRecord) if f.name not in _TRANSIENT]
_SCALAR = {
    int: pa.int64(),
    "int": pa.int64(),
    "int | None": pa.int64(),
    "bool": pa.bool_(),
    "str": pa.string(),
    "str | None": pa.string(),
}


def _schema() -> pa.Schema:
    out = []
    for f in fields(RequestRecord):
        if f.name in _TRANSIENT:
            continue
        if f.name in _INT_LISTS:
            out.append(pa.field(f.name, pa.list_(pa.int64())))
        elif f.name in _OPTIONAL_LISTS:
            out.append(pa.field(f.name, _OPTIONAL_LISTS[f.name]))
        else:
            out.append(pa.field(f.name, _SCALAR[str(f.type)]))
    return pa.schema(out)


SCHEMA = _schema()
_SCALARS = [name for name in _FIELDS if name not in _INT_LISTS and name not in _OPTIONAL_LISTS]


class Columns:
    """Finished records as columns, until they become a record batch: `add` takes a record's
    values (and drops nothing else: the record may go), `batch()` empties it into one batch."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.scalars: dict[str, list] = {name: [] for name in _SCALARS}
        self.flat = {name: array("q") for name in _INT_LISTS}
        self.offsets = {name: [0] for name in _INT_LISTS}
        self.optional: dict[str, list] = {name: [] for name in _OPTIONAL_LISTS}

    def __len__(self) -> int:
        return len(self.scalars["index"])

    def add(self, rec: RequestRecord, text: bool = False) -> None:
        """The record's values; its streamed text only with `text` (a run counting tokens with
        --tokenizer needs it; otherwise the journal holds no text, as requests.parquet)."""
        for name, values in self.scalars.items():
            values.append(getattr(rec, name))
        for name in _INT_LISTS:
            values = getattr(rec, name)
            if name in _DELTA and len(values):
                a = np.frombuffer(values, dtype=np.int64) if isinstance(values, array) else np.asarray(values, np.int64)
                self.flat[name].frombytes(np.diff(a, prepend=np.int64(0)).tobytes())
            else:
                self.flat[name].extend(values)
            self.offsets[name].append(len(self.flat[name]))
        self.optional["chunk_text"].append(rec.chunk_text if text else None)
        for name in _PHASES:
            values = getattr(rec, name)
            self.optional[name].append(None if values is None else values.tolist())
        self.optional["prompt_token_ids"].append(rec.prompt_token_ids)
        self.optional["server_step_accepted"].append(rec.server_step_accepted)
        self.optional["token_ids"].append(rec.token_ids)

    def batch(self) -> pa.RecordBatch:
        cols = []
        for f in SCHEMA:
            if f.name in _INT_LISTS:
                values = pa.array(
                    np.frombuffer(self.flat[f.name], dtype=np.int64) if self.flat[f.name] else [], pa.int64()
                )
                cols.append(pa.ListArray.from_arrays(pa.array(self.offsets[f.name], pa.int32()), values))
            elif f.name in _OPTIONAL_LISTS:
                cols.append(pa.array(self.optional[f.name], f.type))
            else:
                cols.append(pa.array(self.scalars[f.name], f.type))
        self._clear()
        return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)


def records_batch(records: list[RequestRecord], text: bool = True) -> pa.RecordBatch:
    """Records as one batch in the journal's (delta-encoded) form."""
    cols = Columns()
    for rec in records:
        cols.add(rec, text)
    return cols.batch()


def flat(arr: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column's values (int64) and offsets into them (from 0), also for a slice of one,
    whose offsets point into its parent's values."""
    offsets = arr.offsets.to_numpy().astype(np.int64)
    base = int(offsets[0]) if len(offsets) else 0
    values = arr.values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return values[base : int(offsets[-1]) if len(offsets) else 0], offsets - base


def lists(values: np.ndarray, offsets: np.ndarray) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))


def _undelta(arr: pa.ListArray) -> pa.ListArray:
    """Each list's running sum (the journal's differences back to values): one cumulative sum
    over all values, less the sum before each list's start (in unsigned arithmetic, which wraps
    by definition, so sums of nanosecond clocks never overflow into nonsense)."""
    values, offsets = flat(arr)
    if len(values) == 0:
        return lists(values, offsets)
    run = np.cumsum(values.view(np.uint64))
    before = np.zeros(len(offsets) - 1, np.uint64)
    starts = offsets[:-1]
    has = starts > 0
    before[has] = run[starts[has] - 1]
    run -= np.repeat(before, np.diff(offsets))
    return lists(run.view(np.int64), offsets)


def decoded(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A journal batch with its delta-encoded lists back to values (chunk times in ns,
    cumulative usage): the batch form of the records (`records_of`)."""
    cols = [_undelta(batch.column(name)) if name in _DELTA else batch.column(name) for name in batch.schema.names]
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def records_of(batch: pa.RecordBatch) -> list[RequestRecord]:
    """A decoded batch's rows as records."""
    out = []
    data = batch.to_pydict()
    for i in range(batch.num_rows):
        kw = {name: data[name][i] for name in _FIELDS if name in data}  # a journal from before a field: its default
        for name in _INT_LISTS:
            kw[name] = array("q", kw[name] or ())
        if kw.get("chunk_phase") is not None:
            kw["chunk_phase"] = array("b", kw["chunk_phase"])
            kw["chunk_reasoning"] = array("q", kw["chunk_reasoning"] or ())
        out.append(RequestRecord(**kw))
    return out


# pyarrow's first array of Python values imports pandas (~0.2 s): made here, at import, before any
# clock starts, not by the journal's first flush on a running event loop (where it stalled a worker
# process's loop for 200 ms and every chunk timestamp with it)
Columns().batch()
