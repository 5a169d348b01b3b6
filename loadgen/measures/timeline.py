"""The run over time (summary.json's `timeline`; docs/metrics.md, "Over time"): the server's
window sample by sample (loadgen.load.scrape.timeline: counter increases that sum to the
window's own, gauges), with what the client did in each interval beside it: requests sent,
requests ended, and the mean number in flight."""

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
