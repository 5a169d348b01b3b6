"""The decision by goodput (a sweep with --goodput; docs/report.md, "Goodput"): per workload and
load level (a trace's speed, a rate, users), which variant serves the most requests meeting
every objective a second, and by how much over the baseline and over the next best; with
repeats, the rounds' spread. Throughput answers "how many tokens"; goodput, "how many users
got what the SLO promised", which is what decides a deployment on its own traffic."""

from __future__ import annotations

import pandas as pd

from loadgen.report.numbers import short
from loadgen.report.tables import KEYS
from loadgen.results.reading import Sweep

_COLS = ["goodput_req_s", "goodput_fraction"]


def table(sw: Sweep) -> pd.DataFrame:
    """Per cell: good requests a second and the share good (the mean over repeats, with the
    rounds' lowest and highest rate); empty when the sweep judged no objective."""
    if "goodput_req_s" not in sw.ok or sw.ok["goodput_req_s"].isna().all():
        return pd.DataFrame()
    out = sw.ok[KEYS + _COLS].copy()
    if sw.has_repeats:
        spread = sw.measured.groupby(KEYS)["goodput_req_s"].agg(["min", "max"]).reset_index()
        out = out.merge(spread.rename(columns={"min": "goodput_req_s_min", "max": "goodput_req_s_max"}), on=KEYS)
    return out.sort_values(KEYS).reset_index(drop=True)


def best(gp: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per workload and level: the variant(s) with the most good requests a second (ties within
    0.5% named together), their rate, and its ratio to the baseline's and to the next best's."""
    rows = []
    if gp.empty:
        return pd.DataFrame()
    for (workload, mode, level), g in gp.groupby(["workload", "mode", "level"], sort=False):
        g = g.dropna(subset=["goodput_req_s"]).sort_values("goodput_req_s", ascending=False)
        if g.empty:
            continue
        top = float(g["goodput_req_s"].iloc[0])
        tied = g[g["goodput_req_s"] >= top * 0.995]
        rest = g[g["goodput_req_s"] < top * 0.995]
        base = g[g["variant"] == baseline]["goodput_req_s"]
        rows.append(
            {
                "workload": workload,
                "mode": mode,
                "level": level,
                "best_variant": ", ".join(tied["variant"]),
                "goodput_req_s": top,
                "goodput_fraction": float(tied["goodput_fraction"].iloc[0]),
                "over_baseline": top / float(base.iloc[0]) if len(base) and float(base.iloc[0]) > 0 else None,
                "next_best": rest["variant"].iloc[0] if len(rest) else None,
                "over_next": top / float(rest["goodput_req_s"].iloc[0])
                if len(rest) and float(rest["goodput_req_s"].iloc[0]) > 0
                else None,
                **(
                    {
                        "rounds_min": float(tied["goodput_req_s_min"].iloc[0]),
                        "rounds_max": float(tied["goodput_req_s_max"].iloc[0]),
                    }
                    if "goodput_req_s_min" in tied
                    else {}
                ),
            }
        )
    return pd.DataFrame(rows)


def _given(x) -> bool:
    return x is not None and not pd.isna(x)


def _level(mode: str, level: float) -> str:
    if mode == "trace":
        return f"{level:g}x the trace's rate"
    return f"{short(level)} {'users' if mode == 'closed' else 'requests/s'}"


def sentences(bg: pd.DataFrame, objectives: dict | None) -> list[str]:
    """One sentence per workload: at each level, the variant with the highest goodput, and by
    how much."""
    if bg.empty:
        return []
    goals = ", ".join(f"{k}<={v:g}ms" for k, v in (objectives or {}).items())
    out = []
    for workload, g in bg.groupby("workload", sort=False):
        parts = []
        for _, r in g.sort_values("level").iterrows():
            s = f"at {_level(r['mode'], r['level'])}, {r['best_variant']} ({r['goodput_req_s']:.2f} good requests/s, "
            s += f"{r['goodput_fraction']:.0%} of requests good"
            if _given(r["over_baseline"]):
                s += f"; {r['over_baseline']:.2f}x the baseline's"
            if _given(r["next_best"]):
                s += f", {r['over_next']:.2f}x the next best, {r['next_best']}"
            else:
                s += ", every variant within 0.5%"
            if _given(r.get("rounds_min")):
                s += f"; rounds {r['rounds_min']:.2f}-{r['rounds_max']:.2f}"
            parts.append(s + ")")
        out.append(f"On {workload}, by goodput ({goals}): " + "; ".join(parts) + ".")
    return out
