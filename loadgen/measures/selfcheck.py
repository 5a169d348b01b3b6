"""The client judging itself (`self_check`: is the client itself the bottleneck?), from its
requests and the loop-lag ticks loadgen.load.looplag recorded during the run.

When the loop is busy (too many streams to parse, a burst of connections, a blocking
call), that lag also delays every chunk timestamp taken meanwhile, so the figures include the
client's own delay. Per-sample statistics undercount long stalls (a 40 ms stall is one sample),
so the lag is also judged per chunk: each chunk timestamp gets the lag of the tick that covered
it, and the p99 of that says how many timestamps the client may have delayed.

A delay is judged against what it can move (`MOVES`): 6 ms of lag is a fifth of a 30 ms
inter-token gap and under 1% of a 700 ms one. A view flags the run only when its p99 passes its
bound in milliseconds and is more than `PRECISION` of the smallest figure it can move (the run's
median TTFT, inter-chunk gap or end-to-end latency), so a slow engine beside a busy client is not
marked for a delay that no reported figure could show.
"""

from __future__ import annotations

import numpy as np

from loadgen.measures.describe import describe
from loadgen.measures.pooled import counted
from loadgen.measures.rows import Rows

_VIEWS = ("lateness_ms", "loop_lag_ms", "chunk_lag_ms", "read_delay_ms", "chunk_bound_ms")
_NAMES = {
    "lateness_ms": "send lateness",
    "loop_lag_ms": "event-loop lag",
    "chunk_lag_ms": "loop lag over chunk timestamps",
    "read_delay_ms": "first-chunk read delay",
    "chunk_bound_ms": "how far off a chunk's gap can be",
}


PRECISION = 0.01  # a figure is reported to 1% (docs/metrics.md, "The client's self-check")

# the figures (each the run's median) that a view's delay can move: a chunk's time moves the
# gap ending at it and, for a first chunk, the TTFT; a send's lateness moves when the request
# holds its user or slot (its end-to-end time is the smallest share it can take); the loop's lag
# moves either
MOVES = {
    "lateness_ms": ("e2e_ms",),
    "loop_lag_ms": ("gap_ms", "ttft_ms", "e2e_ms"),
    "chunk_lag_ms": ("gap_ms", "ttft_ms"),
    "read_delay_ms": ("ttft_ms",),
    "chunk_bound_ms": ("gap_ms", "ttft_ms"),
}


# where every read's chunk times are the kernel's, the loop's lag moves no chunk time (the
# chunk-gap bound says what it did to each): only when a request was sent
KERNEL_MOVES = {**MOVES, "loop_lag_ms": ("e2e_ms",)}


def _moves(key: str, kernel_times: bool) -> tuple[str, ...]:
    return (KERNEL_MOVES if kernel_times else MOVES)[key]


def _share(key: str, p99: float, figures: dict | None, kernel_times: bool) -> float | None:
    """How large a share of the smallest figure `key`'s delay can move its p99 is (None: no
    figure to judge against, as in a run with no completed request: the bound alone decides)."""
    moved = [figures[f] for f in _moves(key, kernel_times) if figures and (figures.get(f) or 0) > 0]
    return p99 / min(moved) if moved else None


def _judge(
    views: dict,
    threshold_ms: float,
    timing_threshold_ms: float,
    kernel_times: bool = False,
    figures: dict | None = None,
) -> dict:
    bounds = {"lateness_ms": threshold_ms, "loop_lag_ms": threshold_ms}
    if "chunk_bound_ms" in views:
        # the compiled path's views bound the error itself (how far off a gap, or the first
        # chunk's time, can be); the pure-Python path's 4 ms proxy was calibrated to flag errors
        # over 2 ms (docs/performance.md, "client_bound, calibrated"): a bound is held to that
        bounds["chunk_bound_ms"] = bounds["read_delay_ms"] = timing_threshold_ms / 2
    # where every read's chunk times were the kernel's, the loop's lag does not move them and the
    # lag over chunk timestamps is shown only; where any read was timed at select() it is judged
    judged = [k for k in views if k != "chunk_lag_ms" or not kernel_times]
    reasons: list[str] = []
    below: list[str] = []
    for key in judged:
        p99, bound = views[key]["p99"] or 0.0, bounds.get(key, timing_threshold_ms)
        if not views[key]["count"] or p99 <= bound:
            continue
        share = _share(key, p99, figures, kernel_times)
        text = f"{_NAMES[key]} p99 {p99:.1f} ms > {bound:g} ms"
        if share is None:
            reasons.append(text)
        else:
            shared = f"{text}, {100 * share:.1f}% of the median {_smallest(_moves(key, kernel_times), figures or {})}"
            (reasons if share > PRECISION else below).append(shared)
    return {"client_bound": bool(reasons), "reasons": reasons, "below_precision": below, **views}


def _smallest(moved: tuple[str, ...], figures: dict) -> str:
    name = min((f for f in moved if (figures.get(f) or 0) > 0), key=lambda f: figures[f])
    return {"gap_ms": "inter-chunk gap", "ttft_ms": "TTFT", "e2e_ms": "end-to-end latency"}[name]


def self_check(
    rows: Rows,
    lag_at_ns,
    lag_ns,
    threshold_ms: float,
    timing_threshold_ms: float,
    chunk_lag: dict,
    chunk_lag_by_worker: dict[int, dict] | None = None,
    lag_worker=None,
    chunk_bound: list | None = None,
    chunk_times: str | None = None,
    figures: dict | None = None,
) -> dict:
    """Is the client itself the bottleneck? Four views, any over its bound flags the run:
    send lateness (every sent request) and loop lag per tick over `threshold_ms`; loop lag per
    chunk timestamp (`chunk_lag`: the lag that covered each chunk's arrival, over every chunk
    received; loadgen.measures.chunks) and the first chunk's read delay (per request: how long
    the loop had not looked at its sockets before the select that reported the first chunk, so
    how much of the TTFT may be the client's) over `timing_threshold_ms`: the bound on what the
    client's own delay may add to a chunk's time (calibrated in bench/client_capacity.py against
    a server's true write times). With several worker processes (`lag_worker`: whose loop each
    tick was), each chunk is judged by its own worker's loop, and each worker's views are given
    too (`workers`).

    On the compiled read path (`chunk_bound` given: [(ns, chunks)]) chunk times are the kernel's,
    which the loop's lag does not move: a chunk's time can be late only when its read also held
    a later event, and each read bounds by how much (loadgen/client/_hotpath.c); per chunk, how
    far off the gap ending at it (the TTFT, for a first chunk) can be is the fifth view, judged
    over `timing_threshold_ms` in place of the loop lag over chunk timestamps (still shown), and
    the read delay is the first chunk's bound; both are bounds on the error, held to half
    `timing_threshold_ms` (the error the proxy's threshold was calibrated to flag). A read the
    kernel did not stamp was timed at select()'s return: its chunks' bound is the loop's delay
    before that select, and the lag over chunk timestamps is judged too unless every read was
    stamped (`chunk_times` "kernel_receive"). The workers' views show it over all of them.

    `figures` (the run's median TTFT, inter-chunk gap and end-to-end latency, in ms: `gap_ms`,
    `ttft_ms`, `e2e_ms`) are what the delays are judged against (`MOVES`): a view over its bound
    whose p99 is at most `PRECISION` of every figure it can move is listed in
    `below_precision`, not in `reasons`, and does not flag the run."""
    sent = rows.array("t_send_ns") > 0
    lateness = rows.array("lateness_ms", float)
    with_chunks = rows.array("n_chunks") > 0
    read_delay = rows.array("read_delay_ms", float) if "read_delay_ms" in rows else None
    lag = np.asarray(lag_ns, dtype=float)

    bound = None
    if chunk_bound is not None:
        ns = np.array([b for b, _ in chunk_bound], dtype=np.int64)
        bound = counted(ns, np.array([n for _, n in chunk_bound], dtype=np.int64), 1e-6)

    def views(pick: np.ndarray, lags: np.ndarray, chunks: dict) -> dict:
        out = {
            "lateness_ms": describe(lateness[sent & pick]),
            "loop_lag_ms": describe(lags, scale=1e-6),
            "chunk_lag_ms": chunks,
            "read_delay_ms": describe(read_delay[with_chunks & pick] if read_delay is not None else []),
        }
        if bound is not None:
            out["chunk_bound_ms"] = bound
        return out

    kernel = chunk_times == "kernel_receive"  # every read with chunks timed by the kernel
    everyone = np.ones(rows.n, bool)
    out = {
        "threshold_ms": threshold_ms,
        "timing_threshold_ms": timing_threshold_ms,
        "precision": PRECISION,
        "figures": figures,
        **_judge(views(everyone, lag, chunk_lag), threshold_ms, timing_threshold_ms, kernel, figures),
    }
    if lag_worker is not None:
        who = np.asarray(lag_worker)
        worker = rows.array("worker")
        empty = describe([])
        out["workers"] = {}
        for w in np.unique(who).tolist():
            mine = views(worker == w, lag[who == w], (chunk_lag_by_worker or {}).get(w, empty))
            judged = _judge(mine, threshold_ms, timing_threshold_ms, kernel, figures)
            out["workers"][w] = {k: v for k, v in judged.items() if k not in ("reasons", "below_precision")}
    return out
