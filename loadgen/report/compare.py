"""`loadgen compare A B`: the change from sweep A to sweep B in every cell both measured, with
a bootstrap confidence interval from their per-request data (docs/report.md).

Per cell and metric: the relative change stat(B) / stat(A) - 1, and its 95% percentile
bootstrap interval (A's and B's measured requests resampled independently, RESAMPLES times,
seeded). A table of many changes finds some by chance: a change is marked significant only
when its p-value (two-sided, from the bootstrap's standard error of log(B / A), normal
approximation) stays under 0.05 after Holm's correction over every change in the table
(`p_holm`). The bootstrap covers request-to-request variation only; run-to-run variation (a
second run of the same sweep on the same machine) is not covered, and the output says so."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loadgen.report.data import ReportError, Sweep, read

RESAMPLES = 2000
LEVEL = 0.95


def _median(col: str):
    def stat(frame: pd.DataFrame, idx: np.ndarray) -> np.ndarray:
        return np.median(frame[col].to_numpy(float)[idx], axis=-1)
    return stat


def _closed_loop_throughput(concurrency: float):
    """C users each producing tokens / e2e: C x sum(tokens) / sum(e2e), in tokens/s."""
    def stat(frame: pd.DataFrame, idx: np.ndarray) -> np.ndarray:
        tok = frame["completion_tokens"].to_numpy(float)[idx]
        e2e = frame["e2e_ms"].to_numpy(float)[idx] / 1e3
        return concurrency * tok.sum(axis=-1) / e2e.sum(axis=-1)
    return stat


def _metrics(mode: str, level: float) -> dict:
    out = {"ttft_p50_ms": _median("ttft_ms"), "tpot_p50_ms": _median("tpot_ms"), "e2e_p50_ms": _median("e2e_ms")}
    if mode == "closed":
        out["throughput_tok_s"] = _closed_loop_throughput(level)
    return out


def _measured(sw: Sweep, key: str) -> pd.DataFrame | None:
    frame = sw.requests(key)
    if frame is None:
        return None
    m = frame[frame["ok"] & ~frame["warmup"]].dropna(subset=["ttft_ms", "e2e_ms"])
    return m if len(m) >= 2 else None


def change(a: pd.DataFrame, b: pd.DataFrame, stat, rng: np.random.Generator) -> tuple:
    """(stat A, stat B, change, interval low, interval high, p); changes as fractions; p the
    two-sided p-value of no change (bootstrap standard error of log(B / A), normal approximation)."""
    sa, sb = float(stat(a, np.arange(len(a)))), float(stat(b, np.arange(len(b))))
    ia = rng.integers(0, len(a), size=(RESAMPLES, len(a)))
    ib = rng.integers(0, len(b), size=(RESAMPLES, len(b)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = stat(b, ib) / stat(a, ia)
    rel = ratio[np.isfinite(ratio)] - 1.0
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = (np.percentile(rel, [tail, 100 - tail]) if len(rel) else (np.nan, np.nan))
    logs = np.log(ratio[np.isfinite(ratio) & (ratio > 0)])
    p = 1.0
    if sa > 0 and sb > 0 and len(logs) > 1:
        est, se = math.log(sb / sa), float(logs.std(ddof=1))
        p = 1.0 if est == 0 else (0.0 if se == 0 else math.erfc(abs(est) / se / math.sqrt(2)))
    return sa, sb, (sb / sa - 1.0 if sa else np.nan), float(lo), float(hi), p


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error over all of them)."""
    order = np.argsort(p)
    m = len(p)
    adj = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return adj


def compare(dir_a: str, dir_b: str, seed: int = 0) -> pd.DataFrame:
    a, b = read(dir_a), read(dir_b)
    ok_a = a.ok.set_index("path")
    ok_b = b.ok.set_index("path")
    common = [k for k in ok_a.index if k in ok_b.index]
    if not common:
        raise ReportError(f"{dir_a} and {dir_b} have no measured cell in common (cells are "
                          "VARIANT/WORKLOAD/LEVEL); compare sweeps of the same plan")
    rng = np.random.default_rng(seed)
    rows = []
    for key in common:
        ra, rb = _measured(a, key), _measured(b, key)
        if ra is None or rb is None:
            continue
        cell = ok_a.loc[key]
        for name, stat in _metrics(cell["mode"], float(cell["level"])).items():
            sa, sb, rel, lo, hi, p = change(ra, rb, stat, rng)
            rows.append({"cell": key, "metric": name, "a": sa, "b": sb, "change_pct": 100 * rel,
                         "ci_low_pct": 100 * lo, "ci_high_pct": 100 * hi, "requests_a": len(ra),
                         "requests_b": len(rb), "p": p})
    if not rows:
        raise ReportError(f"no cell in common has readable per-request data in both {dir_a} and {dir_b}")
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out["p"].to_numpy(float))
    out["significant"] = out["p_holm"] < 1 - LEVEL
    return out


def render(frame: pd.DataFrame) -> str:
    lines = [f"{'cell':<32} {'metric':<17} {'A':>10} {'B':>10} {'change':>8}  {'95% interval':>18}"]
    for r in frame.itertuples(index=False):
        mark = " *" if r.significant else ""
        lines.append(f"{r.cell:<32} {r.metric:<17} {r.a:>10.4g} {r.b:>10.4g} {r.change_pct:>+7.1f}%  "
                     f"[{r.ci_low_pct:>+6.1f}%, {r.ci_high_pct:>+6.1f}%]{mark}")
    n = int(frame["significant"].sum())
    lines.append(f"\n* significant: p < {1 - LEVEL:.2f} after Holm's correction over the {len(frame)} changes of "
                 f"this table ({n} marked); intervals: {LEVEL:.0%} bootstrap, {RESAMPLES} resamples of each side's "
                 "measured requests.\nThis covers request-to-request variation only: run-to-run variation (the "
                 "same sweep run again on the same machine) is not covered; treat small marked changes with care.")
    return "\n".join(lines)


def chart(frame: pd.DataFrame) -> str:
    """The changes as an interactive chart (plotly, embedded): per metric, each cell's change
    with its interval; significant ones filled, the others hollow."""
    import plotly.graph_objects as go
    fig = go.Figure()
    for metric, g in frame.groupby("metric", sort=False):
        fig.add_trace(go.Scatter(
            x=g["cell"], y=g["change_pct"], mode="markers", name=metric,
            error_y={"type": "data", "symmetric": False, "array": g["ci_high_pct"] - g["change_pct"],
                     "arrayminus": g["change_pct"] - g["ci_low_pct"]},
            marker={"size": 9, "symbol": ["circle" if s else "circle-open" for s in g["significant"]]},
            customdata=g[["metric", "a", "b", "p_holm"]].to_numpy().tolist(),
            hovertemplate="%{x}<br>%{customdata[0]}: %{customdata[1]:,.2f} -> %{customdata[2]:,.2f}"
                          "<br>change %{y:+.1f}%<br>p (Holm) %{customdata[3]:.3f}<extra></extra>"))
    fig.add_hline(y=0, line_dash="dash", line_color="#888")
    fig.update_layout(height=460, yaxis_title="change B / A - 1 (%)", template="plotly_white",
                      margin={"l": 60, "r": 20, "t": 30, "b": 120}, legend={"orientation": "h", "y": 1.08})
    return fig.to_html(full_html=False, include_plotlyjs=True, div_id="compare-chart",
                       config={"displaylogo": False, "responsive": True})


def html_page(frame: pd.DataFrame, dir_a: str, dir_b: str) -> str:
    """The comparison as one self-contained page: the verdict first, the chart, the table."""
    from loadgen.report.render import Section, page
    n = int(frame["significant"].sum())
    lead = [f"{n} of {len(frame)} changes significant after Holm's correction (p < {1 - LEVEL:.2f}).",
            "Request-to-request variation only: run-to-run variation (the same sweep run again on the same "
            "machine) is not covered."]
    table = frame.assign(significant=frame["significant"].map({True: "*", False: ""}))
    section = Section(f"{dir_a} -> {dir_b}", "Per cell and metric: A's and B's figure, the change, its 95% "
                      "bootstrap interval, its p-value and Holm's correction (docs/report.md).",
                      [("Changes", table)], [], chart=chart(frame), lead=lead)
    return page("loadgen compare", [section])
