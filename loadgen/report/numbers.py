"""Numbers for people, in report.md, report.html and their prose: thousands separators, fixed
decimals by size, never scientific notation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def num(v) -> str:
    """12,345 / 123.4 / 12.35 / 1.23 / 0.123 / 0.00012; '-' for a missing value."""
    if v is None or v is pd.NA or (isinstance(v, (float, np.floating)) and math.isnan(v)):
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        v = float(v)
        a = abs(v)
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if a >= 1000 or v == 0:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.{min(12, 2 - math.floor(math.log10(a)))}f}"
    return str(v)


def short(v) -> str:
    """A load level or count: whole numbers without decimals (1,024), others as `num`."""
    if isinstance(v, (int, np.integer)) or (isinstance(v, (float, np.floating)) and float(v).is_integer()):
        return f"{int(v):,}"
    return num(v)
