"""Per-request service-level objectives for goodput: `ttft<=500ms`, `tpot<=50ms`, `e2e<=10s`.

A request is good when it succeeded and meets every objective. TTFT and E2E are taken from
the request's scheduled time (what its user waited, client-side queueing included); TPOT is
per token after the first.
"""
from __future__ import annotations

import re

import pandas as pd

# objective name -> per-request column it is judged on
METRICS = {"ttft": "ttft_from_scheduled_ms", "tpot": "tpot_ms", "e2e": "e2e_from_scheduled_ms"}
_UNITS = {"ms": 1.0, "s": 1000.0}
_EXPR = re.compile(r"^\s*([a-z0-9_]+)\s*<=\s*([0-9]*\.?[0-9]+)\s*(ms|s)\s*$")


def parse(specs: list[str]) -> dict[str, float]:
    """'ttft<=500ms,tpot<=50ms' (or several strings) -> {'ttft': 500.0, 'tpot': 50.0} in ms."""
    out: dict[str, float] = {}
    for spec in specs:
        for part in filter(None, (p.strip() for p in spec.split(","))):
            m = _EXPR.match(part)
            if not m or m.group(1) not in METRICS:
                raise ValueError(f"bad goodput objective {part!r}: write METRIC<=VALUE(ms|s) "
                                 f"with METRIC one of {', '.join(METRICS)}, e.g. ttft<=500ms")
            out[m.group(1)] = float(m.group(2)) * _UNITS[m.group(3)]
    return out


def good(frame: pd.DataFrame, objectives: dict[str, float]) -> pd.Series:
    """Which requests of `frame` are good (boolean, aligned with the frame)."""
    mask = frame["ok"].copy()
    for name, limit in objectives.items():
        mask &= frame[METRICS[name]].fillna(0.0) <= limit
    return mask
