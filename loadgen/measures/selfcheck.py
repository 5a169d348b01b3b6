"""The client judging itself (`self_check`: is the client itself the bottleneck?), from its
requests and the loop-lag ticks loadgen.load.looplag recorded during the run.

When the loop is busy (too many streams to parse, a burst of connections, a blocking
call), that lag also delays every chunk timestamp taken meanwhile, so the figures include the
client's own delay. Per-sample statistics undercount long stalls (a 40 ms stall is one sample),
so the lag is also judged per chunk: each chunk timestamp gets the lag of the tick that covered
it, and the p99 of that says how many timestamps the client may have delayed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.measures.describe import describe


def lag_at(times_ns: np.ndarray, at_ns, lag_ns) -> np.ndarray:
    """The loop lag covering each time: that of the first tick that woke at or after it
    (0 for times after the last tick)."""
    at = np.asarray(at_ns, dtype=np.int64)
    lag = np.append(np.asarray(lag_ns, dtype=np.int64), 0)
    return lag[np.searchsorted(at, np.asarray(times_ns, dtype=np.int64), side="left")]


def _chunk_lag(frame: pd.DataFrame, lag_at_ns, lag_ns, lag_worker) -> np.ndarray:
    """The loop lag that covered each chunk timestamp, each chunk matched to the ticks of the
    loop (worker process) that took it."""

    def chunks(f: pd.DataFrame) -> np.ndarray:
        return f["chunk_t_ns"].explode().dropna().to_numpy(dtype=np.int64)

    if lag_worker is None:
        return lag_at(chunks(frame), lag_at_ns, lag_ns)
    at, lag, who = (np.asarray(x, dtype=np.int64) for x in (lag_at_ns, lag_ns, lag_worker))
    parts = [
        lag_at(chunks(frame[frame["worker"] == w]), at[who == w], lag[who == w]) for w in np.unique(frame["worker"])
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def self_check(
    frame: pd.DataFrame, lag_at_ns, lag_ns, threshold_ms: float, timing_threshold_ms: float = 4.0, lag_worker=None
) -> dict:
    """Is the client itself the bottleneck? Four views, any over its bound flags the run:
    send lateness (every sent request) and loop lag per tick over `threshold_ms`; loop lag per
    chunk timestamp (the lag that covered each chunk's arrival, over every chunk received) and
    the first chunk's read delay (per request: how long the loop had not looked at its sockets
    before the select that reported the first chunk, so how much of the TTFT may be the
    client's) over `timing_threshold_ms`: the bound on what the client's own delay may add to a
    chunk's time (calibrated in bench/client_capacity.py against a server's true write times).
    With several worker processes (`lag_worker`: whose loop each tick was), each chunk is judged
    by its own worker's loop, and each worker's views are given too (`workers`)."""
    sent = frame[frame["t_send_ns"] > 0]
    checks = {
        "lateness_ms": ("send lateness", describe(sent["lateness_ms"]), threshold_ms),
        "loop_lag_ms": ("event-loop lag", describe(np.asarray(lag_ns, dtype=float), scale=1e-6), threshold_ms),
        "chunk_lag_ms": (
            "loop lag over chunk timestamps",
            describe(_chunk_lag(frame, lag_at_ns, lag_ns, lag_worker).astype(float), scale=1e-6),
            timing_threshold_ms,
        ),
        "read_delay_ms": (
            "first-chunk read delay",
            describe(frame.loc[frame["n_chunks"] > 0, "read_delay_ms"] if "read_delay_ms" in frame else []),
            timing_threshold_ms,
        ),
    }
    reasons = [
        f"{name} p99 {d['p99']:.1f} ms > {bound:g} ms"
        for name, d, bound in checks.values()
        if d["count"] and (d["p99"] or 0.0) > bound
    ]
    out = {
        "threshold_ms": threshold_ms,
        "timing_threshold_ms": timing_threshold_ms,
        "client_bound": bool(reasons),
        "reasons": reasons,
        **{key: d for key, (_, d, _) in checks.items()},
    }
    if lag_worker is not None:
        who = np.asarray(lag_worker)
        at, lag = np.asarray(lag_at_ns), np.asarray(lag_ns)
        out["workers"] = {
            int(w): {
                k: v
                for k, v in self_check(
                    frame[frame["worker"] == w], at[who == w], lag[who == w], threshold_ms, timing_threshold_ms
                ).items()
                if k in ("client_bound", *checks)
            }
            for w in np.unique(who)
        }
    return out
