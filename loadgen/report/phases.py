"""A reasoning sweep's phases in the report: per variant and load, how much faster speculative
decoding makes thinking and answering, each against the baseline's own (definitions:
docs/report.md, "Reasoning: thinking and answering"; the cells' figures: summary.json's
`phases`, docs/metrics.md). Empty for a sweep whose cells did not reason."""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.report import tables
from loadgen.report.numbers import short
from loadgen.results.reading import Sweep

_FIGURES = {
    "tpot_thinking_ms": ("tpot_reasoning_ms", "mean"),
    "tpot_answering_ms": ("tpot_answer_ms", "mean"),
    "ttfo_p50_ms": ("ttfo_ms", "p50"),
    "ttfo_p99_ms": ("ttfo_ms", "p99"),
    "reasoning_tokens_mean": ("reasoning_tokens", "mean"),
    "answer_tokens_mean": ("answer_tokens", "mean"),
}


def table(sw: Sweep) -> pd.DataFrame:
    """Per cell with phases (the mean over repeats): per-phase TPOT, TTFO, tokens per decode
    chunk in each phase, and the speedups: the baseline's TPOT in that phase over the
    variant's, at the same workload and level (above 1: the phase decodes faster)."""
    rows = []
    for _, c in sw.measured.iterrows():
        ph = (sw.summaries.get(c["path"]) or {}).get("phases")
        if not ph or not ph.get("reasoning_requests"):
            continue
        row = {k: c[k] for k in tables.KEYS}
        for name, (key, stat) in _FIGURES.items():
            row[name] = (ph.get(key) or {}).get(stat)
        row["tokens_per_chunk_thinking"] = ph.get("tokens_per_chunk_reasoning")
        row["tokens_per_chunk_answering"] = ph.get("tokens_per_chunk_answer")
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    per = pd.DataFrame(rows)
    value_cols = [c for c in per.columns if c not in tables.KEYS]
    per[value_cols] = per[value_cols].astype(float)
    per = per.groupby(tables.KEYS, sort=False, as_index=False)[value_cols].mean()
    base = per[per["variant"] == sw.baseline].drop(columns="variant")
    base = base[["workload", "mode", "level", "tpot_thinking_ms", "tpot_answering_ms"]]
    out = per.merge(base, on=["workload", "mode", "level"], how="left", suffixes=("", "_base"))
    out["thinking_speedup"] = out["tpot_thinking_ms_base"] / out["tpot_thinking_ms"]
    out["answering_speedup"] = out["tpot_answering_ms_base"] / out["tpot_answering_ms"]
    out = out.drop(columns=["tpot_thinking_ms_base", "tpot_answering_ms_base"])
    first = [*tables.KEYS, "thinking_speedup", "answering_speedup"]
    return out[first + [c for c in out.columns if c not in first]].sort_values(tables.KEYS).reset_index(drop=True)


def break_even(ph: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Where SD stops paying in each phase (tables.break_even's rule on each phase's speedup)."""
    if ph.empty:
        return pd.DataFrame()
    sd = ph[ph["variant"] != baseline]
    parts = []
    for phase in ("thinking", "answering"):
        sp = sd.rename(columns={f"{phase}_speedup": "speedup"})[["workload", "mode", "level", "variant", "speedup"]]
        be = tables.break_even(sp.dropna(subset=["speedup"]))
        parts.append(be.assign(phase=phase))
    out = pd.concat(parts, ignore_index=True)
    return out[["workload", "variant", "phase", "mode", "levels", "break_even_level", "verdict"]]


def sentences(ph: pd.DataFrame, be: pd.DataFrame, baseline: str) -> list[str]:
    """Per workload that reasoned and SD variant: its speedup in thinking and in answering over
    the levels measured, and up to which load each pays."""
    out: list[str] = []
    if ph.empty:
        return out
    for (workload, variant), g in ph[ph["variant"] != baseline].groupby(["workload", "variant"], sort=False):
        g = g.sort_values("level")
        mine = be[(be["workload"] == workload) & (be["variant"] == variant)]
        verdicts = dict(zip(mine["phase"], mine["verdict"]))
        out.append(
            f"{workload}, {variant} against {baseline}, per phase: thinking {_span(g, 'thinking_speedup')} "
            f"({verdicts.get('thinking', 'no verdict')}); answering {_span(g, 'answering_speedup')} "
            f"({verdicts.get('answering', 'no verdict')})."
        )
    return out


def _span(g: pd.DataFrame, col: str) -> str:
    """A phase's speedups over the levels: the highest and the lowest, with their loads."""
    unit = {"closed": "users", "trace": "x the trace's rate"}.get(g["mode"].iloc[0], "requests/s")
    s, lv = g[col].to_numpy(float), g["level"].to_numpy(float)
    if np.isnan(s).all():
        return "not measured"
    i, j = int(np.nanargmax(s)), int(np.nanargmin(s))
    if i == j or len(s) == 1:
        return f"{s[i]:.2f}x at {short(lv[i])} {unit}"
    return f"{s[i]:.2f}x at {short(lv[i])} to {s[j]:.2f}x at {short(lv[j])} {unit}"
