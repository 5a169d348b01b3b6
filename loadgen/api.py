"""loadgen as a library: every job the command line runs, callable from Python without click.
The CLI (loadgen/cli/) only turns options into these specs and their results into output.

    from loadgen import api
    from loadgen.run.execute import RunSpec
    from loadgen.shapes import ClosedLoop
    from workloads import open_workload

    job = api.RunJob(RunSpec(api_base="", model="", load=ClosedLoop(8), num_requests=100),
                     open_workload("chat"))           # no target: the embedded emulator
    outcome = api.run(job, "results/c8")               # writes requests.parquet, summary.json
    print(outcome.summary["output_throughput_tok_s"])

Errors a person must fix are `LoadgenError` (one line, naming the input and the fix).
A sweep: `api.sweep(api.SweepJob(output, plan))` (loadgen.sweep.execute; README has an
example)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from loadgen import config
from loadgen.backends.workers import WorkloadRef
from loadgen.errors import LoadgenError
from loadgen.outputs import journal, store
from loadgen.outputs.live import serve as live_metrics
from loadgen.report.data import summaries as _summaries
from loadgen.run.execute import RunResult, RunSpec
from loadgen.run.measurement import Measured, RunJob, measure
from loadgen.run.options import load_shape, objectives, run_job, workload
from loadgen.run.recover import summarize_dir
from loadgen.run.target import Target
from loadgen.run.timescale import TimeScaleError, parse_scale
from loadgen.simulate.job import SimJob, Simulated, sim_job
from loadgen.simulate.job import run_simulation as simulate
from loadgen.sweep.capacity import CapacityJob, CapacityOutcome, capacity_job
from loadgen.sweep.capacity import find_capacity as capacity
from loadgen.sweep.execute import SweepJob, SweepResult, sweep
from loadgen.sweep.plan import Plan
from loadgen.whatif.job import WhatIf, WhatIfJob, traces_from_run, whatif

SUMMARY, REQUESTS = store.SUMMARY, store.REQUESTS

__all__ = ["CapacityJob", "CapacityOutcome", "LoadgenError", "RunOutcome", "Plan", "RunJob", "RunSpec", "SimJob",
           "Simulated", "SweepJob", "SweepResult", "Target", "TimeScaleError", "WhatIf", "WhatIfJob", "WorkloadRef",
           "capacity", "capacity_job", "config", "live_metrics", "load_shape", "objectives", "parse_scale", "prepare", "run",
           "run_job", "sim_job", "simulate", "summaries", "summarize_dir", "sweep", "traces_from_run", "whatif", "workload", "write"]


@dataclass
class RunOutcome:
    """A finished run: its request frame, its summary, and where they were written (if)."""

    frame: pd.DataFrame
    summary: dict
    result: RunResult | None = None
    output: Path | None = None

    @property
    def interrupted(self) -> bool:
        return bool(self.summary.get("interrupted"))


def prepare(output: str | Path) -> Path:
    """The output directory, created and proven writable before any load is sent."""
    try:
        return store.prepare(output)
    except store.OutputError as e:
        raise LoadgenError(str(e)) from None


def write(output: Path, frame: pd.DataFrame, summary: Callable[[], dict]) -> dict:
    """Write the request table first (whatever happens next, what was measured is kept), then
    the summary (computed in between); returns the summary."""
    try:
        store.write_requests(output, frame)
        s = summary()
        store.write_summary(output, s)
    except OSError as e:
        raise LoadgenError(f"cannot write results to {str(output)!r}: {e}", code=1) from None
    return s


def summaries(path: str | Path) -> dict[str, dict]:
    """The summaries under `path` (loadgen.report.data.summaries): a run's directory, or a
    sweep's; a run cut short before it wrote its summary is summarized from its journal first
    (and its summary.json and requests.parquet written)."""
    path = Path(path)
    if not (path / SUMMARY).is_file() and journal.exists(path):
        frame, summary = summarize_dir(path)
        write(path, frame, lambda: summary)
    return _summaries(path)


def run(job: RunJob, output: str | Path | None = None) -> RunOutcome:
    """One measured run (loadgen.run.measurement); with `output`, its results written there."""
    out = prepare(output) if output is not None else None
    if out is not None:  # finished requests are journaled there as the run goes
        journal.clear(out)
        job.journal = str(out)
    measured: Measured = measure(job)
    summary = write(out, measured.frame, measured.summary) if out is not None else measured.summary()
    return RunOutcome(measured.frame, summary, measured.result, out)
