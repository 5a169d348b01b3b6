"""The report's interactive chart: speedup against load, one panel per workload, a line per
variant in the PNGs' colours, with plotly (its JavaScript embedded in the page: it works with
no network). Hovering a point shows its variant, load, speedup, output tokens/s and flags;
clicking a legend entry hides or shows a variant; flagged cells are drawn as crosses; with
repeats, a bar spans the rounds' lowest and highest speedup. Each
point carries [workload, variant, load, speedup, tok/s, flags] as its customdata (the tests read
the chart's data back from the page)."""

from __future__ import annotations

import pandas as pd

from loadgen.report.numbers import short

DIV = "speedup-chart"


def _hover(g: pd.DataFrame, workload: str, variant, tok: str | None, flags: pd.Series) -> list[list]:
    """Each point's hover data: workload, variant, load, speedup, output tok/s, flags."""
    return [
        [
            workload,
            variant,
            float(r["level"]),
            float(r["speedup"]),
            float(r[tok]) if tok and pd.notna(r[tok]) else None,
            flags[i],
        ]
        for i, r in g.iterrows()
    ]


def _spread(g: pd.DataFrame) -> dict:
    """With repeats: the rounds' lowest and highest speedup as an error bar."""
    if "speedup_min" not in g or not g["speedup_min"].notna().any():
        return {}
    return {
        "error_y": {
            "type": "data",
            "symmetric": False,
            "thickness": 1,
            "array": (g["speedup_max"] - g["speedup"]).fillna(0).astype(float),
            "arrayminus": (g["speedup"] - g["speedup_min"]).fillna(0).astype(float),
        }
    }


def speedup_chart(sp: pd.DataFrame, colours: dict[str, str], baseline: str, height: int = 430) -> str:
    """`sp`: the speedup table (workload, mode, level, variant, speedup, output_throughput_tok_s,
    flags). An HTML fragment ('' when there is nothing to draw)."""
    if sp.empty:
        return ""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    workloads = list(dict.fromkeys(sp["workload"]))
    fig = make_subplots(
        rows=1, cols=len(workloads), subplot_titles=workloads, shared_yaxes=True, horizontal_spacing=0.06
    )
    shown = set()
    tok = "output_throughput_tok_s" if "output_throughput_tok_s" in sp else None
    for col, workload in enumerate(workloads, start=1):
        w = sp[sp["workload"] == workload]
        unit = {"closed": "users", "trace": "x the trace's rate"}.get(str(w["mode"].iloc[0]), "requests/s")
        for variant, g in w.groupby("variant", sort=False):
            g = g.sort_values("level")
            flags = g["flags"].fillna("") if "flags" in g else pd.Series([""] * len(g), index=g.index)
            custom, spread = _hover(g, workload, variant, tok, flags), _spread(g)
            fig.add_trace(
                go.Scatter(
                    **spread,
                    x=g["level"].astype(float),
                    y=g["speedup"].astype(float),
                    mode="lines+markers",
                    name=variant,
                    legendgroup=variant,
                    showlegend=variant not in shown,
                    customdata=custom,
                    line={"color": colours.get(variant)},
                    marker={"size": 9, "symbol": ["x" if f else "circle" for f in flags]},
                    hovertemplate=(
                        "<b>%{customdata[1]}</b> on %{customdata[0]}<br>load %{customdata[2]:,} "
                        + unit
                        + "<br>speedup %{customdata[3]:.2f}x<br>%{customdata[4]:,.0f} output tok/s"
                        + "<br>%{customdata[5]}<extra></extra>"
                    ),
                ),
                row=1,
                col=col,
            )
            shown.add(variant)
        fig.update_xaxes(
            type="log",
            title_text=f"load ({unit})",
            row=1,
            col=col,
            tickvals=sorted(set(w["level"].astype(float))),
            ticktext=[short(v) for v in sorted(set(w["level"].astype(float)))],
        )
    fig.add_hline(y=1.0, line_dash="dash", line_color="#888")
    fig.update_yaxes(title_text=f"speedup over {baseline} (x)", row=1, col=1, tickformat=".2f")
    fig.update_layout(
        height=height,
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
        hovermode="closest",
        legend={"orientation": "h", "y": -0.18},
        template="plotly_white",
        separators=".,",
    )
    return fig.to_html(
        full_html=False, include_plotlyjs=True, div_id=DIV, config={"displaylogo": False, "responsive": True}
    )


WHATIF_DIV = "whatif-chart"


def whatif_chart(results: pd.DataFrame, colours: dict[str, str], include_js: bool = True, height: int = 400) -> str:
    """The what-if section's chart: each policy's speedup over no speculation against batch
    size (`results`: whatif.json's rows: policy, realisable, batch, speedup); oracles dashed.
    `include_js`: embed plotly's library (False where the page already holds it)."""
    if results.empty:
        return ""
    import plotly.graph_objects as go

    fig = go.Figure()
    for policy, g in results.groupby("policy", sort=False):
        g = g.sort_values("batch")
        real = bool(g["realisable"].iloc[0]) if "realisable" in g else True
        custom = [
            [policy, float(r["batch"]), float(r["speedup"]), "realisable" if real else "oracle (upper bound)"]
            for _, r in g.iterrows()
        ]
        fig.add_trace(
            go.Scatter(
                x=g["batch"].astype(float),
                y=g["speedup"].astype(float),
                mode="lines+markers",
                name=policy,
                customdata=custom,
                line={"color": colours.get(policy), "dash": "solid" if real else "dash"},
                hovertemplate="<b>%{customdata[0]}</b> (%{customdata[3]})<br>batch size %{customdata[1]:,}"
                "<br>speedup %{customdata[2]:.2f}x<extra></extra>",
            )
        )
    batches = sorted(set(results["batch"].astype(float)))
    fig.update_xaxes(
        type="log",
        title_text="batch size (concurrent requests)",
        tickvals=batches,
        ticktext=[short(b) for b in batches],
    )
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888")
    fig.update_yaxes(title_text="speedup over no speculation (x)", tickformat=".2f")
    fig.update_layout(
        height=height,
        margin={"l": 60, "r": 20, "t": 30, "b": 50},
        hovermode="closest",
        legend={"orientation": "h", "y": -0.2},
        template="plotly_white",
        separators=".,",
    )
    return fig.to_html(
        full_html=False,
        include_plotlyjs=include_js,
        div_id=WHATIF_DIV,
        config={"displaylogo": False, "responsive": True},
    )
