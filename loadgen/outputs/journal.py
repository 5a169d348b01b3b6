"""The run's journal: every finished request appended to the results directory as the run
goes, so a run killed outright (SIGKILL, the OOM killer, a lost session) keeps what finished,
and finished requests need not stay in memory, during the run or after it.

Format (docs/metrics.md, "Long runs"), per load-generating process W (0 for one process):
- `records-W.arrows`: an Arrow IPC stream, zstd-compressed, of finished requests' records
  (loadgen.client.record.RequestRecord's fields, one row each, raw times on CLOCK_MONOTONIC;
  a request cut off by a stopped run is written when the run ends). The per-chunk arrays are
  list columns, `chunk_t_ns` and `chunk_usage` delta-encoded (each value minus the one before
  it in its list: the gaps compress where absolute nanoseconds do not). The stream's schema
  metadata holds the process's start (`t0_ns`, `t0_unix`, `worker`, `workers`, `time_scale`).
- `lag-W.arrows`: the event loop's lag ticks (`at_ns`, `lag_ns`), an Arrow IPC stream too;
- `end-W.json`: written when the process's share of the run ended normally (absent: cut).
What finished is buffered as columns (the record itself is dropped at once) and written as one
record batch every `FLUSH_S`: a process killed outright loses at most what finished in the last
quarter second. A batch cut short by the kill is skipped when read (and counted). Why Arrow IPC
and not JSON lines or Parquet: measured by bench/soak.py --synthetic --forms (docs/performance.md): a
128-chunk request takes ~3.3 kB as JSON, under 1 kB here, and a cut IPC stream is readable up
to its last whole batch, where a Parquet file without its footer is not readable at all.
`config.json` beside them is the run's configuration as known before the load started.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from loadgen.client.columnar import SCHEMA, Columns, decoded, records_of
from loadgen.client.record import RequestRecord

FLUSH_S = 0.25
CONFIG = "config.json"
PATTERN = "records-*.arrows"
_OLD_PATTERN = "records-*.jsonl"  # before the columnar journal: not read any more
_LAG = pa.schema([pa.field("at_ns", pa.int64()), pa.field("lag_ns", pa.int64())])
_WRITE = pa.ipc.IpcWriteOptions(compression="zstd")


# what a run's summary needs of how it was measured beyond its records: the client's read path,
# where its chunk times came from and how far off they can be; kept in each file's end, so that
# `loadgen summarize` (a run rebuilt from its journal) judges the client as the run itself did
LOAD_KEYS = ("client_path", "chunk_times", "chunk_time_reads", "chunk_bound")


def end_of(interrupted: bool, load_info: dict | None) -> dict:
    """A process's end record: whether it was interrupted, and its LOAD_KEYS."""
    load = {k: v for k, v in (load_info or {}).items() if k in LOAD_KEYS and v is not None}
    return {"interrupted": interrupted, "load": load}


def load_of(ended: dict[str, dict]) -> dict:
    """The run's LOAD_KEYS from its files' ends (a worker's each): one read path and chunk-time
    source if all agree ("mixed" if not), the bound's bins and the reads' counts summed."""
    out: dict = {}
    loads = [e.get("load") or {} for e in ended.values()]
    for key in ("client_path", "chunk_times"):
        said = {ld[key] for ld in loads if ld.get(key)}
        if said:
            out[key] = said.pop() if len(said) == 1 else "mixed"
    bound: dict[int, int] = {}
    reads: dict[str, int] = {}
    for ld in loads:
        for ns, n in ld.get("chunk_bound") or ():
            bound[int(ns)] = bound.get(int(ns), 0) + int(n)
        for how, n in (ld.get("chunk_time_reads") or {}).items():
            reads[how] = reads.get(how, 0) + int(n)
    if bound:
        out["chunk_bound"] = sorted(bound.items())
    if reads:
        out["chunk_time_reads"] = reads
    return out


def _key(worker: int, part: int = 0) -> str:
    """A journal file's key: the worker, and the part of the run (a sweep cell continued after
    a kill by `--resume` journals its continuation as part 1, 2, ...)."""
    return str(worker) if part == 0 else f"{worker}-p{part}"


def path_for(directory: str | Path, worker: int, part: int = 0) -> Path:
    return Path(directory) / f"records-{_key(worker, part)}.arrows"


def _lag_path(directory: Path, key: str) -> Path:
    return directory / f"lag-{key}.arrows"


def _end_path(directory: Path, key: str) -> Path:
    return directory / f"end-{key}.json"


def _key_of(path: Path) -> str:
    return path.stem.split("-", 1)[1]


def parts(directory: str | Path) -> int:
    """How many parts the directory's journal has (0: none)."""
    keys = [_key_of(p) for p in Path(directory).glob(PATTERN)]
    return 1 + max((int(k.split("-p")[1]) for k in keys if "-p" in k), default=0) if keys else 0


class Journal:
    """One process's journal, written from its event loop: `add` a finished record, `start`
    the flushing timer (and what it reads the loop's lag from), `close` at the end."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path = path
        self.directory = path.parent
        self.key = _key_of(path)
        schema = SCHEMA.with_metadata({"start": json.dumps(header)})
        self._f = pa.OSFile(str(path), "wb")
        self._w = pa.ipc.new_stream(self._f, schema, options=_WRITE)
        self._lag_f = pa.OSFile(str(_lag_path(self.directory, self.key)), "wb")
        self._lag_w = pa.ipc.new_stream(self._lag_f, _LAG, options=_WRITE)
        self._f.flush()
        self._lag_f.flush()
        self._cols = Columns()
        self._lag = None
        self._lag_done = 0
        self._timer: asyncio.TimerHandle | None = None
        # compressing and writing a batch took 2-4 ms at 512 requests/s (256 streams x 4 ms):
        # done on the loop it made sends that fell in it that late; Arrow lets go of the GIL
        # while it compresses, so one thread writes, in order, and the loop goes on
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="journal")
        self._writes: list[Future] = []

    def add(self, rec: RequestRecord, text: bool = False) -> None:
        self._cols.add(rec, text)

    def start(self, lag_monitor=None) -> None:
        self._lag = lag_monitor
        self._tick()

    def _tick(self) -> None:
        self.flush()
        self._timer = asyncio.get_running_loop().call_later(FLUSH_S, self._tick)

    def _take_lag(self) -> None:
        mon = self._lag
        if mon is not None and len(mon.lag_ns) > self._lag_done:
            n = len(mon.lag_ns)
            # copies: a batch kept (a Relay's) must not hold the monitor's arrays, which grow
            at = np.frombuffer(mon.at_ns, dtype=np.int64)[self._lag_done : n].copy()
            lag = np.frombuffer(mon.lag_ns, dtype=np.int64)[self._lag_done : n].copy()
            self.write_lag(pa.RecordBatch.from_arrays([pa.array(at), pa.array(lag)], schema=_LAG))
            self._lag_done = n

    def flush(self) -> None:
        self._take_lag()
        if len(self._cols):
            self.write_batch(self._cols.batch())

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """A batch of records in the journal's form (or as another process made it: a Ray
        actor's, relayed, `Relay`), written by the journal's thread."""
        self._submit(self._w, self._f, batch)

    def write_lag(self, batch: pa.RecordBatch) -> None:
        self._submit(self._lag_w, self._lag_f, batch)

    def _submit(self, writer, f, batch: pa.RecordBatch) -> None:
        self._writes = [w for w in self._writes if not w.done() or w.exception() is not None]
        self._writes.append(self._writer.submit(_write, writer, f, batch))

    def close(self, end: dict | None = None) -> None:
        """Flush what is left; `end` (the process's share ended normally) marks it whole."""
        if self._timer is not None:
            self._timer.cancel()
        self.flush()
        self._writer.shutdown(wait=True)
        for w in self._writes:
            w.result()  # a write that failed fails the close, as it would have on the loop
        self._w.close()
        self._f.close()
        self._lag_w.close()
        self._lag_f.close()
        if end is not None:
            _end_path(self.directory, self.key).write_text(json.dumps(end))


def _write(writer, f, batch: pa.RecordBatch) -> None:
    writer.write_batch(batch)
    f.flush()


class Relay(Journal):
    """A journal whose batches are kept for another process to fetch (`take`) instead of
    written: a Ray actor's, whose node cannot write to the driver's results directory. The
    driver fetches them as the run goes (twice a second) and writes them to its own journal, so
    a run killed midway keeps what its actors had finished up to the last fetch."""

    def __init__(self) -> None:
        self._cols = Columns()
        self._lag = None
        self._lag_done = 0
        self._timer = None
        self.batches: list[pa.RecordBatch] = []
        self.lags: list[pa.RecordBatch] = []

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.batches.append(batch)

    def write_lag(self, batch: pa.RecordBatch) -> None:
        self.lags.append(batch)

    def take(self) -> tuple[list[pa.RecordBatch], list[pa.RecordBatch]]:
        out = (self.batches, self.lags)
        self.batches, self.lags = [], []
        return out

    def close(self, end: dict | None = None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.flush()


@dataclass
class Journaled:
    """What a results directory's journal holds, but its records (`batches` streams those;
    `read` gathers them, for runs that fit in memory)."""

    records: list[RequestRecord] = field(default_factory=list)
    lag_at_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lag_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lag_worker: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    starts: dict[str, dict] = field(default_factory=dict)  # file key (worker[-pPART]) -> its start
    ended: dict[str, dict] = field(default_factory=dict)  # file key -> its end (absent: cut)
    unreadable: int = 0  # batches cut short (a kill mid-write), skipped
    files: int = 0
    rows: int = 0  # records in the journal

    @property
    def workers(self) -> int:
        """How many load-generating processes wrote it."""
        return len({key.split("-")[0] for key in self.starts})

    @property
    def last(self) -> set[str]:
        """The files of the run's last part (a continued cell's earlier parts were cut, and
        continued: they do not make the run cut)."""
        part = lambda key: int(key.split("-p")[1]) if "-p" in key else 0  # noqa: E731
        final = max((part(k) for k in self.starts), default=0)
        return {k for k in self.starts if part(k) == final}

    @property
    def cut_files(self) -> list[str]:
        """The last part's files that have no end (their process killed outright)."""
        return sorted(self.last - set(self.ended))

    @property
    def cut(self) -> bool:
        """The run did not end as planned: a process's journal has no end (killed outright), or
        a process was stopped (an interrupt, or its parent gone)."""
        return bool(self.cut_files) or any(self.ended[k].get("interrupted") for k in self.last if k in self.ended)


class OldJournal(ValueError):
    """A journal in the JSON-lines form of loadgen before its columnar journal."""


def clear(directory: str | Path) -> None:
    """Remove an earlier run's journal from a directory about to hold a new one."""
    d = Path(directory)
    old = [*d.glob(PATTERN), *d.glob("lag-*.arrows"), *d.glob("end-*.json"), *d.glob(_OLD_PATTERN), d / CONFIG]
    for path in old:
        path.unlink(missing_ok=True)


def exists(directory: str | Path) -> bool:
    return any(Path(directory).glob(PATTERN)) or any(Path(directory).glob(_OLD_PATTERN))


def _stream(path: Path) -> Iterator[pa.RecordBatch | None]:
    """The whole batches of an IPC stream file, then None if it was cut inside one."""
    try:  # read, not memory-mapped: a mapped file's pages count in the process's RSS once read,
        reader = pa.ipc.open_stream(pa.OSFile(str(path)))  # so reading a day's journal would hold it all
    except (pa.ArrowInvalid, OSError):
        yield None  # cut before its schema was whole
        return
    while True:
        try:
            yield reader.read_next_batch()
        except StopIteration:
            return
        except (pa.ArrowInvalid, OSError):
            yield None
            return


def meta(directory: str | Path) -> Journaled:
    """Everything of a directory's journal but its records: each process's start and end, the
    loop's lag ticks (with whose loop each was), the files. Raises OldJournal for a journal of
    an older loadgen."""
    d = Path(directory)
    out = Journaled()
    paths = sorted(d.glob(PATTERN))
    if not paths and any(d.glob(_OLD_PATTERN)):
        raise OldJournal(
            f"{d}: its journal (records-*.jsonl) is in the JSON-lines form of an earlier loadgen; "
            "summarize it with the loadgen that wrote it (config.json's loadgen_version)"
        )
    at, lag, who = [], [], []
    for path in sorted(paths, key=lambda p: (int(_key_of(p).split("-p")[1]) if "-p" in _key_of(p) else 0, p.name)):
        out.files += 1
        key = _key_of(path)
        worker = int(key.split("-")[0])
        start = _start(path)
        if start is None:
            out.unreadable += 1  # cut before its header: nothing in it
            continue
        out.starts[key] = start
        end = _end_path(d, key)
        if end.is_file():
            try:
                out.ended[key] = json.loads(end.read_text())
            except ValueError:
                pass
        lag_path = _lag_path(d, key)
        if lag_path.is_file():
            for batch in _stream(lag_path):
                if batch is None:
                    break
                at.append(batch.column(0).to_numpy())
                lag.append(batch.column(1).to_numpy())
                who.append(np.full(batch.num_rows, worker, np.int64))
    if at:
        out.lag_at_ns, out.lag_ns = np.concatenate(at), np.concatenate(lag)
        if len(at) > 1:  # several files (workers, parts): each worker's ticks in time order
            out.lag_worker = np.concatenate(who)
            order = np.lexsort((out.lag_at_ns, out.lag_worker))
            out.lag_at_ns, out.lag_ns, out.lag_worker = out.lag_at_ns[order], out.lag_ns[order], out.lag_worker[order]
        if out.workers < 2:
            out.lag_worker = np.zeros(0, np.int64)  # one loop: no need to say whose each tick was
    return out


_END = object()


def _start(path: Path) -> dict | None:
    """A journal file's start (its stream's schema metadata); None if cut before it."""
    try:
        with pa.memory_map(str(path)) as source:
            schema = pa.ipc.open_stream(source).schema
        start = json.loads((schema.metadata or {})[b"start"])
        int(start["t0_ns"])
        return start
    except (pa.ArrowInvalid, OSError, KeyError, ValueError, TypeError):
        return None


def batches(
    directory: str | Path, counts: Journaled | None = None, min_rows: int = 0
) -> Iterator[tuple[dict, pa.RecordBatch]]:
    """The journal's records, decoded (loadgen.client.columnar), batch by batch, each with its
    file's start (clock origin, time scale): the processes' files read side by side, the next
    batch always from the one whose last batch ended earliest (so the batches come roughly in
    the order their requests ended); with `min_rows`, a file's consecutive batches joined into
    one of at least that many rows (a live run flushes a quarter second's requests a batch:
    thousands of small batches, each costing its own decoding). `counts`, where given, gets the
    rows read and the batches cut short."""
    readers: list[_Reader] = []
    for path in sorted(Path(directory).glob(PATTERN)):
        start = _start(path)
        if start is not None:
            readers.append(_Reader(_stream(path), start))
    while readers:
        readers.sort(key=lambda r: r.last_end)
        entry = readers[0]
        got: list[pa.RecordBatch] = []
        rows = 0
        while True:
            batch = next(entry.stream, _END)
            if not isinstance(batch, pa.RecordBatch):
                if batch is None and counts is not None:  # cut inside a batch
                    counts.unreadable += 1
                readers.pop(0)
                break
            got.append(batch)
            rows += batch.num_rows
            if rows >= min_rows:
                break
        if rows == 0:
            continue
        batch = got[0] if len(got) == 1 else pa.Table.from_batches(got).combine_chunks().to_batches()[0]
        entry.last_end = int(np.max(batch.column("t_end_ns").to_numpy()))
        if counts is not None:
            counts.rows += batch.num_rows
        yield entry.start, decoded(batch)


@dataclass
class _Reader:
    stream: Iterator[pa.RecordBatch | None]
    start: dict
    last_end: int = -1


def indices(directory: str | Path) -> frozenset[int]:
    """The request numbers the journal holds (what a continued cell must not send again)."""
    out: set[int] = set()
    for _, batch in batches(directory):
        out.update(batch.column("index").to_pylist())
    return frozenset(out)


def read(directory: str | Path) -> Journaled:
    """Every record of the directory's journal in memory, in numbering order (within a
    conversation, turn order): for runs that fit in memory (tests, small runs)."""
    out = meta(directory)
    for _, batch in batches(directory, out):
        out.records.extend(records_of(batch))
    out.records.sort(key=lambda r: (r.index, r.turn))
    return out
