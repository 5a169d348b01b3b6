"""`loadgen compare A B`: the change from sweep A to sweep B in every cell both measured, with
a confidence interval and a p-value (docs/report.md).

Per cell and metric: the relative change B / A - 1, judged one of two ways:
- repeats (both sweeps ran the cell at least twice, `loadgen sweep --repeats`): each repeat's
  figure is one observation, so the spread holds run-to-run variation (server starts, the
  machine's moods) as well as request-to-request. On log scale, a two-sample t test: the
  cell's pooled variance, but never below the variance pooled over every cell of that metric
  in both sweeps (a cell with 2-3 repeats can look steadier than it is); the change is the
  ratio of geometric means, the interval exp(d +- t * se) - 1.
- requests (otherwise): a percentile bootstrap over each side's measured requests
  (RESAMPLES, seeded), its p-value from the bootstrap standard error of log(B / A) (normal
  approximation). It covers request-to-request variation only, and the output says so.
A table of many changes finds some by chance: a change is marked significant only when its
p-value stays under 0.05 after Holm's correction over every change in the table (`p_holm`)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from loadgen.report.numbers import num
from loadgen.report.ttest import t_quantile, t_two_sided
from loadgen.results.reading import ReportError, Sweep, read

RESAMPLES = 2000
LEVEL = 0.95


def _median(col: str):
    def stat(frame: pd.DataFrame, idx: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings():  # a resample without any value (all NaN): NaN, left out below
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmedian(frame[col].to_numpy(float)[idx], axis=-1)  # over requests that have one

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
    lo, hi = np.percentile(rel, [tail, 100 - tail]) if len(rel) else (np.nan, np.nan)
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


def _runs(sw: Sweep) -> dict[str, tuple[dict, list[pd.DataFrame]]]:
    """Cell key -> (its first ok measurement's row, every ok measurement's requests)."""
    out: dict[str, tuple[dict, list]] = {}
    for _, row in sw.measured.iterrows():
        frame = _measured(sw, row["path"])
        entry = out.setdefault(row["cell"], (row.to_dict(), []))
        if frame is not None:
            entry[1].append(frame)
    return out


def compare(dir_a: str, dir_b: str, seed: int = 0) -> pd.DataFrame:
    a, b = read(dir_a), read(dir_b)
    runs_a, runs_b = _runs(a), _runs(b)
    common = [k for k in runs_a if k in runs_b]
    if not common:
        raise ReportError(
            f"{dir_a} and {dir_b} have no measured cell in common (cells are "
            "VARIANT/WORKLOAD/LEVEL); compare sweeps of the same plan"
        )
    rng = np.random.default_rng(seed)
    rows: list = []
    logs: list = []
    for key in common:
        (cell, fa), (_, fb) = runs_a[key], runs_b[key]
        if not fa or not fb:
            continue
        for name, stat in _metrics(cell["mode"], float(cell["level"])).items():
            base = {
                "cell": key,
                "metric": name,
                "repeats_a": len(fa),
                "repeats_b": len(fb),
                "requests_a": sum(map(len, fa)),
                "requests_b": sum(map(len, fb)),
            }
            if len(fa) >= 2 and len(fb) >= 2:
                xa = [float(stat(f, np.arange(len(f)))) for f in fa]
                xb = [float(stat(f, np.arange(len(f)))) for f in fb]
                if all(math.isfinite(x) and x > 0 for x in xa + xb):  # else (a NaN TPOT, a 0): the requests
                    logs.append((len(rows), np.log(xa), np.log(xb)))
                    rows.append({**base, "basis": "repeats"})
                    continue
            sa, sb, rel, lo, hi, p = change(pd.concat(fa), pd.concat(fb), stat, rng)
            rows.append(
                {
                    **base,
                    "basis": "requests",
                    "a": sa,
                    "b": sb,
                    "change_pct": 100 * rel,
                    "ci_low_pct": 100 * lo,
                    "ci_high_pct": 100 * hi,
                    "p": p,
                }
            )
    for i, judged in _by_repeats(logs, [r["metric"] for r in rows]).items():
        rows[i].update(judged)
    if not rows:
        raise ReportError(f"no cell in common has readable per-request data in both {dir_a} and {dir_b}")
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out["p"].to_numpy(float))
    out["significant"] = out["p_holm"] < 1 - LEVEL
    cols = [
        "cell",
        "metric",
        "a",
        "b",
        "change_pct",
        "ci_low_pct",
        "ci_high_pct",
        "p",
        "p_holm",
        "significant",
        "basis",
        "repeats_a",
        "repeats_b",
        "requests_a",
        "requests_b",
    ]
    return out[cols]


def _by_repeats(logs: list[tuple], metrics: list[str]) -> dict[int, dict]:
    """The repeats' t tests (module docstring): row index -> its figures. `logs`: (row index,
    log figures of A's repeats, of B's)."""
    pooled: dict[str, tuple[float, int]] = {}  # metric -> (sum of squared deviations, df), both sweeps
    for i, la, lb in logs:
        ss, df = pooled.get(metrics[i], (0.0, 0))
        pooled[metrics[i]] = (
            ss + float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum()),
            df + len(la) + len(lb) - 2,
        )
    out = {}
    for i, la, lb in logs:
        df_cell = len(la) + len(lb) - 2
        var_cell = float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum()) / df_cell
        ss, df_all = pooled[metrics[i]]
        var_all = ss / df_all
        var, df = (var_cell, df_cell) if var_cell >= var_all else (var_all, df_all)
        se = math.sqrt(var * (1 / len(la) + 1 / len(lb)))
        d = float(lb.mean() - la.mean())
        p = (1.0 if d == 0 else 0.0) if se == 0 else t_two_sided(d / se, df)
        half = t_quantile(LEVEL, df) * se
        out[i] = {
            "a": math.exp(la.mean()),
            "b": math.exp(lb.mean()),
            "change_pct": 100 * math.expm1(d),
            "ci_low_pct": 100 * math.expm1(d - half),
            "ci_high_pct": 100 * math.expm1(d + half),
            "p": p,
        }
    return out


def render(frame: pd.DataFrame) -> str:
    lines = [f"{'cell':<32} {'metric':<17} {'A':>10} {'B':>10} {'change':>8}  {'95% interval':>18}"]
    for r in frame.itertuples(index=False):
        mark = " *" if r.significant else ""
        lines.append(
            f"{r.cell:<32} {r.metric:<17} {num(r.a):>10} {num(r.b):>10} {r.change_pct:>+7.1f}%  "
            f"[{r.ci_low_pct:>+6.1f}%, {r.ci_high_pct:>+6.1f}%]{mark}"
        )
    n = int(frame["significant"].sum())
    lines.append(
        f"\n* significant: p < {1 - LEVEL:.2f} after Holm's correction over the {len(frame)} changes of "
        f"this table ({n} marked).\n" + basis(frame)
    )
    return "\n".join(lines)


def basis(frame: pd.DataFrame) -> str:
    """What the intervals and p-values cover, in words."""
    reps = frame[frame["basis"] == "repeats"]
    out = []
    if len(reps):
        out.append(
            f"{len(reps)} of {len(frame)} changes are judged from the sweeps' repeats ({int(reps['repeats_a'].min())}"
            f"+ and {int(reps['repeats_b'].min())}+ per cell): their {LEVEL:.0%} intervals (t, log scale) cover "
            "run-to-run variation too."
        )
    per_a, per_b = frame["requests_a"] / frame["repeats_a"], frame["requests_b"] / frame["repeats_b"]
    uneven = frame.loc[(per_a - per_b).abs() > 0.5, "cell"].unique()
    if len(uneven):
        out.append(
            f"In {len(uneven)} cell(s) A and B measured a different number of requests (cells bounded by "
            "--duration): their changes include the different work; sweep with --num-requests to compare "
            "the same requests."
        )
    if len(reps) < len(frame):
        out.append(
            f"{len(frame) - len(reps)} of {len(frame)} changes: {LEVEL:.0%} bootstrap intervals, {RESAMPLES} "
            "resamples of each side's measured requests. They cover request-to-request variation only: "
            "run-to-run variation (the same sweep run again on the same machine) is not covered; treat "
            "small marked changes with care, or sweep with --repeats 3 on both sides."
        )
    return " ".join(out)


def chart(frame: pd.DataFrame) -> str:
    """The changes as an interactive chart (plotly, embedded): per metric, each cell's change
    with its interval; significant ones filled, the others hollow."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for metric, g in frame.groupby("metric", sort=False):
        fig.add_trace(
            go.Scatter(
                x=g["cell"],
                y=g["change_pct"],
                mode="markers",
                name=metric,
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": g["ci_high_pct"] - g["change_pct"],
                    "arrayminus": g["change_pct"] - g["ci_low_pct"],
                },
                marker={"size": 9, "symbol": ["circle" if s else "circle-open" for s in g["significant"]]},
                customdata=g[["metric", "a", "b", "p_holm"]].to_numpy().tolist(),
                hovertemplate="%{x}<br>%{customdata[0]}: %{customdata[1]:,.2f} -> %{customdata[2]:,.2f}"
                "<br>change %{y:+.1f}%<br>p (Holm) %{customdata[3]:.3f}<extra></extra>",
            )
        )
    fig.add_hline(y=0, line_dash="dash", line_color="#888")
    fig.update_layout(
        height=460,
        yaxis_title="change B / A - 1 (%)",
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 30, "b": 120},
        legend={"orientation": "h", "y": 1.08},
    )
    return fig.to_html(
        full_html=False,
        include_plotlyjs=True,
        div_id="compare-chart",
        config={"displaylogo": False, "responsive": True},
    )


def html_page(frame: pd.DataFrame, dir_a: str, dir_b: str) -> str:
    """The comparison as one self-contained page: the verdict first, the chart, the table."""
    from loadgen.report.render import Section, page

    n = int(frame["significant"].sum())
    lead = [f"{n} of {len(frame)} changes significant after Holm's correction (p < {1 - LEVEL:.2f}).", basis(frame)]
    table = frame.assign(significant=frame["significant"].map({True: "*", False: ""}))
    section = Section(
        f"{dir_a} -> {dir_b}",
        "Per cell and metric: A's and B's figure, the change, its 95% "
        "interval, its p-value and Holm's correction, and what they are judged from (basis: the "
        "repeats, or the requests; docs/report.md).",
        [("Changes", table)],
        [],
        chart=chart(frame),
        lead=lead,
    )
    return page("loadgen compare", [section])
