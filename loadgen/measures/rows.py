"""The request frame as the summary reads it: one column at a time, and the per-chunk list
columns in batches, whether the frame is in memory (a DataFrame) or on disk
(requests.parquet, for a run too long to hold: a day at 100 requests a second is 8.7 million
rows, and its chunk lists a billion values). The summary never holds more than a few columns of
one value per request, and one batch of chunks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

BATCH = 1024  # requests per batch of chunk lists (at 128 chunks: 131,072 values a column; with the
# reading thread's batches ahead, what the summary holds of chunks whatever the run's length)
_NULLABLE_INT = pd.Int64Dtype()


class Rows:
    """`col(name)`: one column, positional (a RangeIndex); `batches(names)`: the named columns
    in batches of rows, each with its first row's position; `names`, `n`."""

    def __init__(self, frame: pd.DataFrame | None = None, path: str | Path | None = None) -> None:
        if (frame is None) == (path is None):
            raise ValueError("give a frame or a path")
        self.frame = None if frame is None else frame.reset_index(drop=True)
        self.path = None if path is None else Path(path)
        self._table: pa.Table | None = None
        if self.frame is not None:
            self.names = list(self.frame.columns)
            self.n = len(self.frame)
        else:
            f = pq.ParquetFile(self.path)
            self.names = f.schema_arrow.names
            self.n = f.metadata.num_rows

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def col(self, name: str) -> pd.Series:
        if self.frame is not None:
            return self.frame[name]
        f = pq.ParquetFile(self.path)
        kind = f.schema_arrow.field(name).type
        strings = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        table = pq.read_table(self.path, columns=[name], read_dictionary=[name] if strings else None)
        column = table.column(0)
        if strings:
            return pd.Series(column.to_pandas(), name=name).astype("category")
        if pa.types.is_integer(kind) and column.null_count:
            return pd.Series(column.to_pandas(types_mapper={pa.int64(): _NULLABLE_INT}.get), name=name)
        return pd.Series(column.to_pandas(), name=name)

    def array(self, name: str, dtype=None) -> np.ndarray:
        """A column as a numpy array (nulls as NaN where `dtype` is float)."""
        s = self.col(name)
        if dtype is float:
            return s.astype("float64").to_numpy(dtype=float, na_value=np.nan)
        return s.to_numpy(dtype=dtype) if dtype is not None else s.to_numpy()

    def batches(self, names: list[str]) -> Iterator[tuple[int, pa.RecordBatch]]:
        if self.frame is not None:
            if self._table is None or any(n not in self._table.column_names for n in names):
                from loadgen.measures.frame import (
                    SCHEMA,  # the frame's types (an empty list column has none of its own)
                )

                known = pa.schema([SCHEMA.field(n) for n in names if n in SCHEMA.names])
                schema = known if len(known) == len(names) else None
                self._table = pa.Table.from_pandas(self.frame[names], schema=schema, preserve_index=False)
            table = self._table.select(names)
            start = 0
            for batch in table.to_batches(max_chunksize=BATCH):
                yield start, batch
                start += batch.num_rows
            return
        start = 0
        source = pq.ParquetFile(self.path, pre_buffer=False)  # pre-buffered, a pass held the file read so far
        for batch in ahead(source.iter_batches(batch_size=BATCH, columns=names)):
            yield start, batch
            start += batch.num_rows


def ahead(items: Iterator, depth: int = 2) -> Iterator:
    """`items`, produced by a thread of their own up to `depth` ahead: reading and decoding
    Parquet (or a journal) releases the GIL, so it goes on while the figures are computed from
    the batch before, on the machine's second core."""
    import queue
    import threading

    box: queue.Queue = queue.Queue(depth)
    done = object()
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                box.put(item)
        except BaseException as e:  # handed to the consumer, raised there
            box.put(_Failed(e))
        box.put(done)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while (item := box.get()) is not done:
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # let it finish its put and see `stop`
            try:
                box.get_nowait()
            except queue.Empty:
                thread.join(0.01)


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def counts(values: pd.Series) -> dict:
    """How often each value occurs, in the order each first occurs (as collections.Counter
    over the values would give), without a Python object per row."""
    s = values.astype("category") if not isinstance(values.dtype, pd.CategoricalDtype) else values
    codes = s.cat.codes.to_numpy()
    codes = codes[codes >= 0]
    if codes.size == 0:
        return {}
    uniq, first, n = np.unique(codes, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    cats = s.cat.categories
    return {cats[uniq[i]]: int(n[i]) for i in order}
