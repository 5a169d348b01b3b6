"""requests.parquet written from a run's journal in pieces: the journal's record batches
(loadgen.outputs.journal) converted to emulated time, turned into frame rows
(loadgen.measures.frame) and written as Parquet row groups, so the end of a run of any length
holds one row group at a time, never the run.

Row order: sorted by request number (then turn) within each row group (at most ROW_GROUP
requests and ROW_GROUP_CHUNKS chunks), the row groups in the order their requests ended; a run
within one row group is sorted throughout (docs/metrics.md, "Long runs"). The chunk bound is
what keeps the end of a run's memory flat with its length: a row group is held whole while it is
sorted and written (and read back for the summary), and a group of 16,384 requests of 128 chunks
held some 220 MB more at a 60-second run's end than a 15-second run's (issue 46)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loadgen.load import timescale
from loadgen.measures.frame import SCHEMA, frame_table
from loadgen.measures.rows import ahead
from loadgen.outputs import journal
from loadgen.results import allocators, store

ROW_GROUP = 16384
ROW_GROUP_CHUNKS = 1 << 17  # 1,024 requests of 128 chunks
BATCH = 2048  # journal rows turned into frame rows at once


def write_from_journal(directory: str | Path, tokenizer=None, into: Path | None = None) -> journal.Journaled:
    """`directory`'s journal as `into` (default: its requests.parquet), atomically; returns
    what the journal held (its starts, ends, lag ticks, rows, cut batches)."""
    allocators.end_of_run()
    d = Path(directory)
    meta = journal.meta(d)
    path = into or d / store.REQUESTS

    def groups() -> Iterator[list[pa.Table]]:
        """The frame rows, a row group's worth at a time."""
        pending: list[pa.Table] = []
        held = chunks = 0
        for start, batch in ahead(journal.batches(d, meta, min_rows=BATCH)):
            scale = float(start.get("time_scale") or 1.0)
            batch = timescale.batch_to_emulated(batch, int(start["t0_ns"]), scale)
            rows = frame_table(batch, tokenizer)
            n = np.asarray(pc.fill_null(rows.column("n_chunks"), 0).to_numpy(zero_copy_only=False), np.int64)
            i = 0
            while i < rows.num_rows:  # as many rows as the group has room for (a request over
                cum = np.cumsum(n[i:])  # the bound on its own: a group of one)
                take = min(ROW_GROUP - held, int(np.searchsorted(cum, ROW_GROUP_CHUNKS - chunks, side="right")))
                if take == 0 and not held:
                    take = 1
                if take:
                    pending.append(rows.slice(i, take))
                    held, chunks, i = held + take, chunks + int(cum[take - 1]), i + take
                if not take or held >= ROW_GROUP or chunks >= ROW_GROUP_CHUNKS:
                    yield pending
                    pending, held, chunks = [], 0, 0
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
