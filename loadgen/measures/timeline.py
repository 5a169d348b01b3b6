"""The run over time (summary.json's `timeline`; docs/metrics.md, "Over time"): the server's
window sample by sample (loadgen.load.scrape.timeline: counter increases that sum to the
window's own, gauges), with what the client did in each interval beside it: requests sent,
requests ended, and the mean number in flight. A run longer than an hour keeps it in summary.json
at most `MOST` intervals long, consecutive intervals merged (`coarsen`: every sum still exact),
and the whole series beside it in timeline.parquet (`table`; written by loadgen.results.store)."""

from __future__ import annotations

import numpy as np

_NS = 1e9


def _integral(times: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each x: the integral from -inf to x of #(times <= t) dt = sum over times <= x of
    (x - time) (times sorted)."""
    k = np.searchsorted(times, x, side="right")
    before = np.concatenate([[0.0], np.cumsum(times)])
    return k * x - before[k]


def client(send_ns: np.ndarray, end_ns: np.ndarray, edges_s: np.ndarray) -> dict:
    """Per interval between consecutive `edges_s` (monotonic seconds): requests sent and ended
    in it (each once: (a, b]) and the time-weighted mean in flight (sent and not yet ended; a
    request that never ended counts to the last edge)."""
    sends = np.sort(send_ns[send_ns > 0] / _NS)
    ended = end_ns > 0
    ends = np.sort(np.where(ended, end_ns, 0)[ended & (send_ns > 0)] / _NS)
    in_flight_area = _integral(sends, edges_s) - _integral(ends, edges_s)
    dt = np.diff(edges_s)
    return {
        "sends": np.diff(np.searchsorted(sends, edges_s, side="right")).tolist(),
        "completions": np.diff(np.searchsorted(ends, edges_s, side="right")).tolist(),
        "in_flight": np.where(dt > 0, np.diff(in_flight_area) / np.where(dt > 0, dt, 1), np.nan).tolist(),
    }


def _ratio(a: list, b: list, plus: float = 0.0) -> list:
    return [plus + x / y if y else None for x, y in zip(a, b)]


def timeline(rows, server_figures: dict | None) -> dict | None:
    """summary.json's `timeline` (None without a sampled server window)."""
    tl = (server_figures or {}).get("timeline")
    if not tl:
        return None
    t0 = float(server_figures["t0_s"])  # type: ignore[index]
    edges = t0 + np.concatenate([[0.0], np.asarray(tl["t_s"], float)])
    out = dict(tl)
    out["generation_tok_s"] = [g / d if d > 0 else None for g, d in zip(tl["generation_tokens"], tl["dt_s"])]
    if any(tl["drafts"]):
        out["acceptance_rate"] = _ratio(tl["accepted_tokens"], tl["draft_tokens"])
        out["acceptance_length"] = _ratio(tl["accepted_tokens"], tl["drafts"], 1.0)
    out["client"] = client(rows.array("t_send_ns").astype(np.int64), rows.array("t_end_ns").astype(np.int64), edges)
    return out


MOST = 3600  # intervals kept in summary.json: an hour of one-second samples (~0.8 MB of JSON)
_SUMMED = ("dt_s", "generation_tokens", "prompt_tokens", "drafts", "draft_tokens", "accepted_tokens")
_GAUGES = ("running", "waiting", "kv_usage")


def _weighted(values: list, dt: np.ndarray, bins: np.ndarray) -> list:
    """Per bin, the dt-weighted mean of the values given (None where none is)."""
    v = np.array([np.nan if x is None else x for x in values], float)
    has = ~np.isnan(v)
    w = np.bincount(bins, weights=np.where(has, dt, 0.0))
    total = np.bincount(bins, weights=np.where(has, np.nan_to_num(v) * dt, 0.0))
    return [float(t / n) if n > 0 else None for t, n in zip(total, w)]


def coarsen(tl: dict, most: int = MOST) -> dict:
    """The timeline in at most `most` intervals, each `group` consecutive ones merged: counters
    and the client's sends and ends summed (so every total is the same), running, waiting, KV
    use and in flight as time-weighted means; rates recomputed from the sums."""
    n = len(tl["t_s"])
    group = -(-n // most)
    if group <= 1:
        return tl
    bins = np.arange(n) // group
    last = np.minimum((np.arange(bins[-1] + 1) + 1) * group, n) - 1
    dt = np.asarray(tl["dt_s"], float)
    out: dict = {"t_s": [tl["t_s"][i] for i in last]}
    for key in _SUMMED:
        summed = np.bincount(bins, weights=np.asarray(tl[key], float))
        out[key] = summed.tolist() if key == "dt_s" else [int(round(x)) for x in summed]
    per_pos = tl.get("accepted_per_position")
    if per_pos:
        a = np.asarray(per_pos, float)
        out["accepted_per_position"] = [
            [int(round(x)) for x in row] for row in np.add.reduceat(a, np.arange(len(last)) * group)
        ]
    else:
        out["accepted_per_position"] = per_pos
    for key in _GAUGES:
        if key in tl:
            out[key] = _weighted(tl[key], dt, bins)
    out["generation_tok_s"] = [g / d if d > 0 else None for g, d in zip(out["generation_tokens"], out["dt_s"])]
    if any(out["drafts"]):
        out["acceptance_rate"] = _ratio(out["accepted_tokens"], out["draft_tokens"])
        out["acceptance_length"] = _ratio(out["accepted_tokens"], out["drafts"], 1.0)
    c = tl["client"]
    out["client"] = {
        "sends": np.bincount(bins, weights=c["sends"]).astype(int).tolist(),
        "completions": np.bincount(bins, weights=c["completions"]).astype(int).tolist(),
        "in_flight": _weighted(c["in_flight"], dt, bins),
    }
    out["coarsened"] = {"intervals": n, "merged": group, "full": "timeline.parquet"}
    return out


def table(tl: dict):
    """The whole timeline as a table, one row an interval (timeline.parquet)."""
    import pandas as pd

    cols = {k: v for k, v in tl.items() if isinstance(v, list) and len(v) == len(tl["t_s"])}
    cols.update({f"client_{k}": v for k, v in tl["client"].items()})
    return pd.DataFrame(cols)
