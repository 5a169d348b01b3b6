"""The per-chunk figures of a run, computed over the frame's chunk lists batch by batch
(loadgen.measures.rows), never all at once: pooled ITL, inter-chunk gaps and tokens per decode
chunk (measured requests), the loop lag that covered each chunk's timestamp (every request,
each chunk judged by its own worker's loop), the output tokens that arrived inside the
throughput window, and the engine steps' tokens.

Exact, in bounded memory. ITL and gaps go through loadgen.measures.pooled (one pass over the
batches when their values fit in memory, three otherwise). Tokens per chunk and the chunk lag
take few distinct values (small integers; the lag of one of the loop's ticks), so their
distributions are counted in the first pass (pooled.counted): per token count, and per tick
how many chunks it covered. While a distribution's values fit in memory (pooled.HOLD) it is
also held whole and its figures are numpy's own over it.

Per request (definitions in docs/metrics.md): ITL gives each token its chunk's gap divided by
the chunk's tokens, and the first chunk's extra tokens 0 (they came with it); the values are
produced in the order the per-request definition lists them, so that a run held whole gets
numpy's figures over the same array, bit for bit."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from loadgen.client.columnar import flat
from loadgen.measures.describe import describe
from loadgen.measures.pooled import Pooled, counted
from loadgen.measures.rows import Rows

_NS_PER_MS = 1e6


class _Ticks:
    """One loop's lag ticks (made once: a day holds 8.6 million), and how many chunk timestamps
    each covered (`hits`; the last entry: times after the last tick, lag 0)."""

    def __init__(self, at_ns, lag_ns) -> None:
        self.at_ns = np.asarray(at_ns, dtype=np.int64)
        self.lag = np.append(np.asarray(lag_ns, dtype=np.int64), 0)
        self.hits = np.zeros(len(self.lag), np.int64)

    def index(self, times_ns) -> np.ndarray:
        return np.searchsorted(self.at_ns, np.asarray(times_ns, dtype=np.int64), side="left")

    def cover(self, times_ns) -> np.ndarray:
        """Count the times against the ticks that covered them; their lags (ns)."""
        i = self.index(times_ns)
        self.hits += np.bincount(i, minlength=len(self.lag))
        return self.lag[i]


@dataclass
class _Counted:
    """A distribution counted in one pass, and held whole while it fits (pooled.HOLD)."""

    held: Pooled = field(default_factory=lambda: Pooled(one_pass=True))

    def result(self, values: np.ndarray, counts: np.ndarray, scale: float = 1.0) -> dict:
        return self.held.result() if self.held.whole else counted(values, counts, scale)


@dataclass
class ChunkFigures:
    itl: Pooled = field(default_factory=Pooled)
    gaps: Pooled = field(default_factory=Pooled)
    decode_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # decode chunks by tokens
    decode_held: _Counted = field(default_factory=_Counted)
    ticks: dict[int, _Ticks] = field(default_factory=dict)  # worker (-1: one loop for all) -> its ticks
    lag_held: dict[int, _Counted] = field(default_factory=dict)
    window_tokens: int = 0  # output tokens that arrived inside the window (successful requests)
    step_count: int = 0  # decode steps of the measured requests
    step_tokens: int = 0  # ... and their tokens
    # per request (every row, by position): the accepted drafts its stream shows (decode steps'
    # tokens beyond one each), its decode steps and its last step's tokens; the input of
    # loadgen.measures.reconcile
    row_accepted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    row_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    row_last_step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    row_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # all its steps' tokens

    @property
    def decode_total(self) -> int:
        return int((np.arange(len(self.decode_counts)) * self.decode_counts).sum())

    @property
    def decode_count(self) -> int:
        return int(self.decode_counts.sum())

    lags: dict[int, dict] = field(default_factory=dict)  # worker -> its chunk lag's figures (ms)
    lags_all: dict = field(default_factory=dict)  # ... over every worker's chunks

    def decode(self) -> dict:
        return self.decode_held.result(np.arange(len(self.decode_counts)), self.decode_counts)

    def lag(self, worker: int) -> dict:
        return self.lags[worker]

    def lag_all(self) -> dict:
        return self.lags_all

    def close_lags(self) -> None:
        """The chunk lag's figures, per worker and over all (as one array would give them,
        workers in order); then the ticks go (a day's are 8.6 million)."""
        workers = sorted(self.lag_held)
        for w in workers:
            t = self.ticks[w]
            self.lags[w] = self.lag_held[w].result(t.lag, t.hits, 1e-6)
        if len(workers) == 1:
            self.lags_all = self.lags[workers[0]]
        elif not workers:
            self.lags_all = describe(np.zeros(0))
        elif all(self.lag_held[w].held.whole for w in workers):
            held = [a for w in workers for a in (self.lag_held[w].held.held or [])]
            self.lags_all = describe(np.concatenate(held) if held else np.zeros(0))
        else:
            ticks = [self.ticks[w] for w in workers]
            lags, hits = np.concatenate([t.lag for t in ticks]), np.concatenate([t.hits for t in ticks])
            self.lags_all = counted(lags, hits, 1e-6)
        self.ticks.clear()
        self.lag_held.clear()


def chunk_figures(
    rows: Rows,
    measured: np.ndarray,
    ok: np.ndarray,
    window: tuple[int, int] | None,
    lag_at_ns,
    lag_ns,
    lag_worker=None,
) -> ChunkFigures:
    """Every per-chunk figure of `rows` (`measured` and `ok`: which rows count, by position)."""
    out = ChunkFigures(
        row_accepted=np.zeros(rows.n, np.int64),
        row_steps=np.zeros(rows.n, np.int64),
        row_last_step=np.zeros(rows.n, np.int64),
        row_tokens=np.zeros(rows.n, np.int64),
    )
    at, lag = np.asarray(lag_at_ns, dtype=np.int64), np.asarray(lag_ns, dtype=np.int64)
    who = None if lag_worker is None else np.asarray(lag_worker, dtype=np.int64)
    if who is None:
        out.ticks[-1] = _Ticks(at, lag)
    else:
        for w in np.unique(who).tolist():
            out.ticks[w] = _Ticks(at[who == w], lag[who == w])
    first = ["chunk_t_ns", "chunk_tokens", "step_tokens"] + (["worker"] if who is not None else [])
    for start, batch in rows.batches(first):
        _first_pass(out, batch, start, measured, ok, window, who is not None)
    out.close_lags()
    while any([out.itl.next_pass(), out.gaps.next_pass()]):  # both asked, every time
        for start, batch in rows.batches(["chunk_t_ns", "chunk_tokens"]):
            _per_token(out, batch, start, measured)
    return out


def _chunks(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch's chunk times and tokens, flat; each chunk's row; whether it is its request's first."""
    t, off = flat(batch.column("chunk_t_ns"))
    n, _ = flat(batch.column("chunk_tokens"))
    lengths = np.diff(off)
    rid = np.repeat(np.arange(batch.num_rows), lengths)
    first = np.zeros(len(t), bool)
    first[off[:-1][lengths > 0]] = True
    return t, n, rid, first, off


def _per_token(out: ChunkFigures, batch: pa.RecordBatch, start: int, measured: np.ndarray):
    """ITL (each chunk's zeros or repeats, in order) and gaps of the measured requests; returns
    what the first pass goes on with."""
    t, n, rid, first, off = _chunks(batch)
    rows = measured[start : start + batch.num_rows]
    everyone = bool(rows.all())
    mine = np.ones(len(t), bool) if everyone else rows[rid]
    later = ~first
    g = np.empty(len(t))
    if len(t):
        g[0] = 0.0
        g[1:] = (t[1:] - t[:-1]) / _NS_PER_MS
        g[first] = 0.0  # a request's first chunk has no gap (the difference is to another request's last)
    f, gm, nm = (first, g, n) if everyone else (first[mine], g[mine], n[mine])
    # each chunk's ITL value once per token it stands for: its gap over its tokens; the first
    # chunk's extra tokens 0
    out.itl.add(np.where(f, 0.0, gm / nm), np.where(f, nm - 1, nm))
    dec = mine & later
    out.gaps.add(g[dec])
    return t, n, rid, dec


def _first_pass(out, batch, start, measured, ok, window, per_worker) -> None:
    rows = batch.num_rows
    t, n, rid, dec = _per_token(out, batch, start, measured)
    decode = n[dec]
    if decode.size:
        counts = np.bincount(decode)
        if len(counts) > len(out.decode_counts):
            counts[: len(out.decode_counts)] += out.decode_counts
            out.decode_counts = counts
        else:
            out.decode_counts[: len(counts)] += counts
        out.decode_held.held.add(decode)
    # every request's chunks: the loop lag that covered each, by its worker's loop
    if not per_worker:
        out.lag_held.setdefault(-1, _Counted()).held.add(out.ticks[-1].cover(t) * 1e-6)
    else:
        workers = batch.column("worker").to_numpy(zero_copy_only=False)[rid]
        for w in np.unique(workers).tolist():
            ticks = out.ticks.setdefault(w, _Ticks([], []))
            out.lag_held.setdefault(w, _Counted()).held.add(ticks.cover(t[workers == w]) * 1e-6)
    if window is not None:
        inside = ok[start : start + rows][rid] & (t >= window[0]) & (t <= window[1])
        out.window_tokens += int(n[inside].sum())
    s, soff = flat(batch.column("step_tokens"))
    slen = np.diff(soff)
    srid = np.repeat(np.arange(rows), slen)
    sfirst = np.zeros(len(s), bool)
    sfirst[soff[:-1][slen > 0]] = True
    steps = s[measured[start : start + rows][srid] & ~sfirst]
    out.step_count += int(steps.size)
    out.step_tokens += int(steps.sum())
    later = ~sfirst
    # a first chunk of more than the prefill's one token carries decode steps too (vLLM merges a
    # request's first outputs when the client reads them late): its tokens beyond the first are
    # a decode chunk of their own, or the rule would miss them (tests/test_measure.py)
    extra = np.zeros(rows, np.int64)
    extra[slen > 0] = s[soff[:-1][slen > 0]] - 1
    accepted = np.bincount(srid[later], weights=s[later] - 1, minlength=rows).astype(np.int64)
    out.row_accepted[start : start + rows] = accepted + np.maximum(extra - 1, 0)
    out.row_steps[start : start + rows] = np.bincount(srid[later], minlength=rows) + (extra > 0)
    out.row_tokens[start : start + rows] = np.bincount(srid, weights=s, minlength=rows).astype(np.int64)
    last = np.zeros(rows, np.int64)
    last[slen > 0] = s[soff[1:][slen > 0] - 1]
    out.row_last_step[start : start + rows] = last
