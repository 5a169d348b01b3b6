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

from loadgen.measures.rows import Rows


@dataclass
class RunOutcome:
    rows: Rows | pd.DataFrame  # the request frame, in memory or on disk (requests.parquet)
    summary: dict
    result: Any = None  # the raw loadgen.load.execute.RunResult, where kept
    output: Path | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rows, pd.DataFrame):
            self.rows = Rows(self.rows)

    @property
    def frame(self) -> pd.DataFrame:
        """The request frame in memory (read from requests.parquet where it is on disk: for a
        run that fits in memory)."""
        assert isinstance(self.rows, Rows)
        if self.rows.frame is not None:
            return self.rows.frame
        assert self.rows.path is not None
        return pd.read_parquet(self.rows.path)

    @property
    def interrupted(self) -> bool:
        return bool(self.summary.get("interrupted"))
