"""requests.parquet written from a run's journal in pieces: the journal's record batches
(loadgen.outputs.journal) converted to emulated time, turned into frame rows
(loadgen.measures.frame) and written as Parquet row groups, so the end of a run of any length
holds one row group at a time, never the run.

Row order: sorted by request number (then turn) within each row group of ROW_GROUP requests,
the row groups in the order their requests ended; a run of up to ROW_GROUP requests is sorted
throughout (docs/metrics.md, "Long runs")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.load import timescale
from loadgen.measures.frame import SCHEMA, frame_table
from loadgen.measures.rows import ahead
from loadgen.outputs import journal
from loadgen.results import store

ROW_GROUP = 16384
BATCH = 2048  # journal rows turned into frame rows at once


def write_from_journal(directory: str | Path, tokenizer=None, into: Path | None = None) -> journal.Journaled:
    """`directory`'s journal as `into` (default: its requests.parquet), atomically; returns
    what the journal held (its starts, ends, lag ticks, rows, cut batches)."""
    d = Path(directory)
    meta = journal.meta(d)
    path = into or d / store.REQUESTS

    def groups() -> Iterator[list[pa.Table]]:
        """The frame rows, a row group's worth at a time."""
        pending: list[pa.Table] = []
        held = 0
        for start, batch in ahead(journal.batches(d, meta, min_rows=BATCH)):
            scale = float(start.get("time_scale") or 1.0)
            batch = timescale.batch_to_emulated(batch, int(start["t0_ns"]), scale)
            pending.append(frame_table(batch, tokenizer))
            held += batch.num_rows
            if held >= ROW_GROUP:
                yield pending
                pending, held = [], 0
        if pending or not meta.rows:
            yield pending

    def write(tmp: str) -> None:
        with pq.ParquetWriter(tmp, SCHEMA) as out:
            for sorted_group in ahead(_sorted(group) for group in groups()):  # sorted and written by
                out.write_table(sorted_group, row_group_size=len(sorted_group) + 1)  # a thread of its own

    store.atomic(path, write)
    return meta


def _sorted(parts: list[pa.Table]) -> pa.Table:
    table = pa.concat_tables(parts) if parts else SCHEMA.empty_table()
    return table.sort_by([("index", "ascending"), ("turn", "ascending")])
