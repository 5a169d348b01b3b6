"""The report's figures (matplotlib, Agg: no display needed). One PNG per question; every
axis labelled with its unit, every figure titled, one colour per variant in all of them."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from loadgen.report.numbers import num, short  # noqa: E402

BASELINE_COLOUR = "#444444"
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
DPI = 100


def colours(variants: list[str], baseline: str) -> dict[str, str]:
    """A fixed colour per variant: the baseline dark grey, the others in plan order."""
    others = [v for v in variants if v != baseline]
    return {baseline: BASELINE_COLOUR, **{v: PALETTE[i % len(PALETTE)] for i, v in enumerate(others)}}


def _grid(n: int, title: str, rows: int = 1):
    fig, axes = plt.subplots(rows, n, figsize=(5.2 * n, 3.9 * rows), squeeze=False)
    fig.suptitle(title, fontsize=13)
    return fig, axes


def _load_axis(ax, mode: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xlabel(
        {"closed": "concurrency (users)", "trace": "trace speed (x its own rate)"}.get(
            mode, "arrival rate (requests/s)"
        )
    )
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: short(v)))
    ax.grid(True, alpha=0.3)


def _log_y(ax) -> None:
    ax.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: short(v))
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _workloads(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["workload"]))


def _panels(frame: pd.DataFrame, title: str, col: dict[str, str]):
    """A figure with a panel per workload: (fig, [(axes, workload, its rows, its variants in
    colour order)])."""
    workloads = _workloads(frame)
    fig, axes = _grid(len(workloads), title)
    out = []
    for ax, workload in zip(axes[0], workloads):
        g = frame[frame["workload"] == workload]
        out.append((ax, workload, g, [v for v in col if v in set(g["variant"])]))
    return fig, out


def _label(ax, workload: str, xlabel: str | None, ylabel: str) -> None:
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"workload {workload}")
    ax.legend(fontsize=8)


def lines_vs_load(
    frame: pd.DataFrame,
    y: str,
    ylabel: str,
    title: str,
    col: dict[str, str],
    path: Path,
    hline: float | None = None,
    marks: pd.DataFrame | None = None,
) -> Path | None:
    """One panel per workload, one line per variant of `y` against load."""
    if frame.empty or frame[y].dropna().empty:
        return None
    fig, panels = _panels(frame, title, col)
    for ax, workload, g, variants in panels:
        for variant in variants:
            d = g[g["variant"] == variant].groupby("level", as_index=False)[y].mean()  # repeats: their mean
            ax.plot(d["level"], d[y], marker="o", color=col[variant], label=variant)
        if hline is not None:
            ax.axhline(hline, color="black", linewidth=0.8, linestyle=":")
        if marks is not None:
            for _, m in marks[(marks["workload"] == workload) & marks["break_even_level"].notna()].iterrows():
                ax.axvline(m["break_even_level"], color=col.get(m["variant"], "black"), linestyle="--", linewidth=1)
                ax.annotate(
                    num(m["break_even_level"]),
                    (m["break_even_level"], hline or 1.0),
                    textcoords="offset points",
                    xytext=(4, 6),
                    color=col.get(m["variant"], "black"),
                )
        _load_axis(ax, g["mode"].iloc[0])
        _label(ax, workload, None, ylabel)
    return _save(fig, path)


def latency(frame: pd.DataFrame, col: dict[str, str], path: Path) -> Path | None:
    """TTFT and TPOT, p50 (solid) and p99 (dashed), against load."""
    if frame.empty:
        return None
    workloads = _workloads(frame)
    fig, axes = _grid(len(workloads), "Latency against load: p50 solid, p99 dashed", rows=2)
    for j, workload in enumerate(workloads):
        g = frame[frame["workload"] == workload]
        for i, (metric, label) in enumerate((("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms per token)"))):
            ax = axes[i][j]
            for variant in [v for v in col if v in set(g["variant"])]:
                d = g[g["variant"] == variant].sort_values("level")
                ax.plot(d["level"], d[f"{metric}_p50_ms"], marker="o", color=col[variant], label=variant)
                ax.plot(d["level"], d[f"{metric}_p99_ms"], linestyle="--", color=col[variant])
            _load_axis(ax, g["mode"].iloc[0])
            _log_y(ax)
            ax.set_ylabel(label)
            ax.set_title(f"workload {workload}: {label.split(' ')[0]}")
            ax.legend(fontsize=8)
    return _save(fig, path)


def frontier(frame: pd.DataFrame, col: dict[str, str], path: Path) -> Path | None:
    """Throughput against per-token latency, one point per load level, per variant."""
    if frame.empty:
        return None
    fig, panels = _panels(frame, "Throughput-latency frontier (each point a load level)", col)
    for ax, workload, g, variants in panels:
        for variant in variants:
            d = g[g["variant"] == variant].sort_values("level")
            ax.plot(d["tpot_p50_ms"], d["output_throughput_tok_s"], marker="o", color=col[variant], label=variant)
            for _, r in d.iterrows():
                ax.annotate(
                    short(r["level"]),
                    (r["tpot_p50_ms"], r["output_throughput_tok_s"]),
                    textcoords="offset points",
                    xytext=(3, 3),
                    fontsize=7,
                    color=col[variant],
                )
        ax.grid(True, alpha=0.3)
        _label(ax, workload, "TPOT p50 (ms per token)", "output throughput (tokens/s)")
    return _save(fig, path)


def per_position(frame: pd.DataFrame, path: Path) -> Path | None:
    """Per-position acceptance against load: a panel per workload and SD variant."""
    if frame.empty:
        return None
    pairs = list(dict.fromkeys(zip(frame["workload"], frame["variant"])))
    fig, axes = _grid(len(pairs), "Per-position acceptance against load (server counters)")
    for ax, (workload, variant) in zip(axes[0], pairs):
        g = frame[(frame["workload"] == workload) & (frame["variant"] == variant)]
        for pos, d in g.groupby("position"):
            d = d.groupby("level", as_index=False)["acceptance"].mean()  # repeats: their mean
            ax.plot(d["level"], d["acceptance"], marker="o", label=f"position {pos}")
        _load_axis(ax, g["mode"].iloc[0])
        ax.set_ylim(0, 1)
        ax.set_ylabel("accepted / drafts")
        ax.set_title(f"{variant} on {workload}")
        ax.legend(fontsize=8)
    return _save(fig, path)


def step_distribution(frame: pd.DataFrame, col: dict[str, str], path: Path) -> Path | None:
    """Client side: share of decode steps by tokens emitted, per variant."""
    if frame.empty:
        return None
    fig, panels = _panels(frame, "Tokens per decode step, as the client saw them (all levels)", col)
    for ax, workload, g, variants in panels:
        width = 0.8 / max(len(variants), 1)
        for i, variant in enumerate(variants):
            d = g[g["variant"] == variant]
            ax.bar(
                d["tokens_per_step"] + (i - (len(variants) - 1) / 2) * width,
                d["share"],
                width=width,
                color=col[variant],
                label=variant,
            )
        ax.set_xticks(sorted(g["tokens_per_step"].unique()))
        ax.grid(True, axis="y", alpha=0.3)
        _label(ax, workload, "tokens per step", "share of decode steps")
    return _save(fig, path)


def per_request(frame: pd.DataFrame, col: dict[str, str], path: Path) -> Path | None:
    """Each request's own acceptance against its TPOT: why some requests are slow."""
    if frame.empty:
        return None
    fig, panels = _panels(frame, "Per request: tokens per step against TPOT (all levels)", col)
    for ax, workload, g, variants in panels:
        for variant in variants:
            d = g[g["variant"] == variant]
            ax.scatter(d["tokens_per_step"], d["tpot_ms"], s=10, alpha=0.6, color=col[variant], label=variant)
        _log_y(ax)
        ax.grid(True, alpha=0.3)
        _label(ax, workload, "tokens per decode step (request mean)", "TPOT (ms per token)")
    return _save(fig, path)


def per_request_server(frame: pd.DataFrame, col: dict[str, str], path: Path) -> Path | None:
    """Each request's acceptance length as the server reported it (vLLM's per-request
    metrics.speculative_decoding) against its output length (top) and its TPOT (bottom)."""
    if frame.empty or "server_acceptance_length" not in frame or frame["server_acceptance_length"].dropna().empty:
        return None
    frame = frame.dropna(subset=["server_acceptance_length"])
    workloads = _workloads(frame)
    fig, axes = _grid(
        len(workloads),
        "Per request (server-reported): acceptance length against output length and TPOT (all levels)",
        rows=2,
    )
    for i, workload in enumerate(workloads):
        g = frame[frame["workload"] == workload]
        for row, (x, xlabel) in enumerate((("completion_tokens", "output tokens"), ("tpot_ms", "TPOT (ms per token)"))):
            ax = axes[row][i]
            for variant in (v for v in col if v in set(g["variant"])):
                d = g[g["variant"] == variant]
                ax.scatter(d[x], d["server_acceptance_length"], s=10, alpha=0.6, color=col[variant], label=variant)
            ax.set_xscale("log")
            ax.grid(True, alpha=0.3)
            _label(ax, workload, xlabel, "acceptance length (1 + accepted / steps)")
    return _save(fig, path)
