"""A finished measurement as its users get it: the request frame and the summary (and, where
there is one, the raw result and the directory they were written to). What `loadgen.api.run`
returns, and what a sweep's cell and a capacity probe give their runner, measured or simulated.
Names across the tree: a *Result is a load's raw data (load.execute.RunResult,
simulate.virtual.SimResult), a *Outcome a finished job's answer (this, SweepOutcome,
CapacityOutcome)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd


@dataclass
class RunOutcome:
    frame: pd.DataFrame
    summary: dict
    result: Any = None  # the raw loadgen.load.execute.RunResult, where kept
    output: Path | None = None

    @property
    def interrupted(self) -> bool:
        return bool(self.summary.get("interrupted"))
