"""The report's "Over time" section: each cell's server window sample by sample beside what the
client did (summary.json's `timeline`, docs/metrics.md "Over time"), as a table, an interactive
timeline with a cell picker, and a scatter over the whole sweep of acceptance and throughput
against the running batch, where speculative decoding's pay-off meets the load that erodes it."""

from __future__ import annotations

import pandas as pd

from loadgen.report.tables import KEYS
from loadgen.results.reading import Sweep

TIMELINE_DIV, SCATTER_DIV = "timeline-chart", "batch-scatter"
_SERVER = ("running", "waiting", "kv_usage", "generation_tok_s", "acceptance_length", "acceptance_rate")


def table(sw: Sweep) -> pd.DataFrame:
    """One row per measured cell and sampling interval (empty when no cell has a timeline)."""
    rows = []
    for _, c in sw.measured.iterrows():
        tl = (sw.summaries.get(c["path"]) or {}).get("timeline")
        if not tl:
            continue
        client = tl.get("client") or {}
        for i, t in enumerate(tl["t_s"]):
            row = {**{k: c[k] for k in KEYS}, "path": c["path"], "t_s": t, "dt_s": tl["dt_s"][i]}
            for k in _SERVER:
                row[k] = (tl.get(k) or [None] * len(tl["t_s"]))[i]
            for k in ("in_flight", "sends", "completions"):
                row[k] = (client.get(k) or [None] * len(tl["t_s"]))[i]
            rows.append(row)
    return pd.DataFrame(rows)


def timeline_chart(tl: pd.DataFrame, include_js: bool, height: int = 520) -> str:
    """Running and waiting requests and the client's in flight (top), generation tokens/s and
    acceptance length (bottom) against time, one cell at a time (a menu picks it)."""
    if tl.empty:
        return ""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, specs=[[{}], [{"secondary_y": True}]])
    cells = list(dict.fromkeys(tl["path"]))
    per = 5  # traces a cell
    for n, key in enumerate(cells):
        g = tl[tl["path"] == key]
        show = n == 0
        for name, col, row, secondary in (
            ("running (server)", "running", 1, False),
            ("waiting (server)", "waiting", 1, False),
            ("in flight (client)", "in_flight", 1, False),
            ("generation tok/s", "generation_tok_s", 2, False),
            ("acceptance length", "acceptance_length", 2, True),
        ):
            fig.add_trace(
                go.Scatter(x=g["t_s"], y=g[col], name=name, mode="lines+markers", visible=show, legendgroup=name),
                row=row,
                col=1,
                secondary_y=secondary if row == 2 else None,
            )
    buttons = [
        {
            "label": key,
            "method": "update",
            "args": [{"visible": [i // per == n for i in range(per * len(cells))]}, {"title.text": key}],
        }
        for n, key in enumerate(cells)
    ]
    fig.update_layout(
        height=height,
        title={"text": cells[0]},
        updatemenus=[{"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.15, "yanchor": "top"}],
        margin={"l": 60, "r": 60, "t": 80, "b": 40},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.12},
    )
    fig.update_xaxes(title_text="seconds since the window opened", row=2, col=1)
    fig.update_yaxes(title_text="requests", row=1, col=1)
    fig.update_yaxes(title_text="tokens/s", row=2, col=1)
    fig.update_yaxes(title_text="tokens per step", row=2, col=1, secondary_y=True)
    return fig.to_html(full_html=False, include_plotlyjs=include_js, div_id=TIMELINE_DIV, config={"displaylogo": False})


def batch_scatter(tl: pd.DataFrame, colours: dict[str, str], height: int = 420) -> str:
    """Every sampling interval of every cell: acceptance length and generation tokens/s against
    the running batch at its end, a colour per variant."""
    if tl.empty:
        return ""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("acceptance length", "generation tokens/s"))
    for variant, g in tl.groupby("variant", sort=False):
        for col, y in ((1, "acceptance_length"), (2, "generation_tok_s")):
            if g[y].notna().any():
                fig.add_trace(
                    go.Scatter(
                        x=g["running"],
                        y=g[y],
                        mode="markers",
                        name=str(variant),
                        legendgroup=str(variant),
                        showlegend=bool(col == 1 or g["acceptance_length"].isna().all()),
                        marker={"color": colours.get(str(variant)), "size": 6, "opacity": 0.7},
                        customdata=g[["path", "t_s"]].to_numpy(),
                        hovertemplate="%{customdata[0]} at %{customdata[1]:.1f} s<br>running %{x}<br>%{y:.2f}"
                        "<extra></extra>",
                    ),
                    row=1,
                    col=col,
                )
    fig.update_xaxes(title_text="running requests (server)")
    fig.update_layout(height=height, template="plotly_white", margin={"l": 60, "r": 20, "t": 40, "b": 50})
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=SCATTER_DIV, config={"displaylogo": False})
