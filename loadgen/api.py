"""loadgen as a library: every job the command line runs, callable from Python without click.
The CLI (loadgen/cli/) only turns options into these specs and their results into output.

    from loadgen import api
    from loadgen.load.execute import RunSpec
    from loadgen.shapes import ClosedLoop
    from workloads import open_workload

    job = api.RunJob(RunSpec(api_base="", model="", load=ClosedLoop(8), num_requests=100),
                     open_workload("chat"))           # no target: the embedded emulator
    outcome = api.run(job, "results/c8")               # writes requests.parquet, summary.json
    print(outcome.summary["output_throughput_tok_s"])

Errors a person must fix are `LoadgenError` (one line, naming the input and the fix).
A sweep: `api.sweep(api.SweepJob(output, plan))` (loadgen.sweep.job; README has an
example)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.errors import LoadgenError

if TYPE_CHECKING:
    import pandas as pd

    from loadgen.results.outcome import RunOutcome
    from loadgen.run.measurement import RunJob

# The library's members, each imported when first used (`api.run` loads the run's modules, not
# the report's, the sweep's or the what-if's): `loadgen --help` and `loadgen run` start in a
# fraction of the time an import of everything took (docs/performance.md, "Test suite").
_LAZY = {
    "config": ("loadgen", "config"),
    "WorkloadRef": ("loadgen.load.workload", "WorkloadRef"),
    "live_metrics": ("loadgen.outputs.live", "serve"),
    "RunSpec": ("loadgen.load.execute", "RunSpec"),
    "RunResult": ("loadgen.load.execute", "RunResult"),
    "Measured": ("loadgen.run.measurement", "Measured"),
    "RunJob": ("loadgen.run.measurement", "RunJob"),
    "RunOptions": ("loadgen.options", "RunOptions"),
    "SimOptions": ("loadgen.options", "SimOptions"),
    "SweepOptions": ("loadgen.options", "SweepOptions"),
    "CapacityOptions": ("loadgen.options", "CapacityOptions"),
    "shape_options": ("loadgen.shapes.options", "options"),
    "plan_from": ("loadgen.planning.build", "plan_from"),
    "load_shape": ("loadgen.run.options", "load_shape"),
    "objectives": ("loadgen.run.options", "objectives"),
    "run_job": ("loadgen.run.options", "run_job"),
    "workload": ("loadgen.run.options", "workload"),
    "summarize_dir": ("loadgen.results.recover", "summarize_dir"),
    "Target": ("loadgen.run.target", "Target"),
    "TimeScaleError": ("loadgen.load.timescale", "TimeScaleError"),
    "parse_scale": ("loadgen.load.timescale", "parse_scale"),
    "SimJob": ("loadgen.simulate.job", "SimJob"),
    "Simulated": ("loadgen.simulate.job", "Simulated"),
    "sim_job": ("loadgen.simulate.job", "sim_job"),
    "simulate": ("loadgen.simulate.job", "run_simulation"),
    "CapacityJob": ("loadgen.capacity.job", "CapacityJob"),
    "CapacityOutcome": ("loadgen.capacity.job", "CapacityOutcome"),
    "capacity_job": ("loadgen.capacity.job", "capacity_job"),
    "capacity": ("loadgen.capacity.job", "find_capacity"),
    "SweepJob": ("loadgen.sweep.job", "SweepJob"),
    "SweepOutcome": ("loadgen.sweep.job", "SweepOutcome"),
    "RunOutcome": ("loadgen.results.outcome", "RunOutcome"),
    "sweep": ("loadgen.sweep.job", "sweep"),
    "Plan": ("loadgen.planning.plan", "Plan"),
    "WhatIf": ("loadgen.whatif.job", "WhatIf"),
    "WhatIfJob": ("loadgen.whatif.job", "WhatIfJob"),
    "traces_from_run": ("loadgen.whatif.job", "traces_from_run"),
    "whatif": ("loadgen.whatif.job", "whatif"),
    "export_llmd": ("loadgen.report.llmd", "export"),
    "FitJob": ("loadgen.fit.job", "FitJob"),
    "Fitted": ("loadgen.fit.job", "Fitted"),
    "fit": ("loadgen.fit.job", "fit"),
}


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'loadgen.api' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


SUMMARY, REQUESTS = "summary.json", "requests.parquet"  # loadgen.results.store's names

__all__ = [
    "CapacityJob",
    "CapacityOptions",
    "CapacityOutcome",
    "FitJob",
    "Fitted",
    "RunOptions",
    "SimOptions",
    "SweepOptions",
    "plan_from",
    "shape_options",
    "LoadgenError",
    "RunOutcome",
    "Plan",
    "RunJob",
    "RunSpec",
    "SimJob",
    "Simulated",
    "SweepJob",
    "SweepOutcome",
    "Target",
    "TimeScaleError",
    "WhatIf",
    "WhatIfJob",
    "WorkloadRef",
    "capacity",
    "capacity_job",
    "config",
    "fit",
    "live_metrics",
    "load_shape",
    "objectives",
    "parse_scale",
    "prepare",
    "run",
    "run_job",
    "sim_job",
    "simulate",
    "summaries",
    "summarize_dir",
    "sweep",
    "traces_from_run",
    "whatif",
    "workload",
    "write",
]


def prepare(output: str | Path) -> Path:
    """The output directory, created and proven writable before any load is sent."""
    from loadgen.results import store

    try:
        return store.prepare(output)
    except store.OutputError as e:
        raise LoadgenError(str(e)) from None


def write(output: Path, frame: pd.DataFrame | None, summary: Callable[[], dict]) -> dict:
    """Write the request table first (whatever happens next, what was measured is kept; None:
    it is there already, written from the journal), then the summary (computed in between);
    returns the summary."""
    from loadgen.results import store

    try:
        if frame is not None:
            store.write_requests(output, frame)
        s = summary()
        store.write_summary(output, s)
    except OSError as e:
        raise LoadgenError(f"cannot write results to {str(output)!r}: {e}", code=1) from None
    return s


def summaries(path: str | Path) -> dict[str, dict]:
    """The summaries under `path` (loadgen.results.reading.summaries): a run's directory, or a
    sweep's; a run cut short before it wrote its summary is summarized from its journal first
    (and its summary.json and requests.parquet written)."""
    from loadgen.outputs import journal
    from loadgen.results.reading import summaries as of_path
    from loadgen.results.recover import summarize_dir

    path = Path(path)
    if not (path / SUMMARY).is_file() and journal.exists(path):
        _, summary = summarize_dir(path)
        write(path, None, lambda: summary)
    return of_path(path)


def run(job: RunJob, output: str | Path | None = None) -> RunOutcome:
    """One measured run (loadgen.run.measurement); with `output`, its results written there."""
    from loadgen.outputs import journal
    from loadgen.results.outcome import RunOutcome
    from loadgen.run.measurement import measure

    out = prepare(output) if output is not None else None
    if out is not None:  # finished requests are journaled there as the run goes
        journal.clear(out)
        job.journal = str(out)
    measured = measure(job)
    if out is None:
        return RunOutcome(measured.rows, measured.summary(), measured.result, out)
    in_memory = measured.rows.frame  # None: requests.parquet is written, from the journal
    summary = write(out, in_memory, measured.summary)
    return RunOutcome(measured.rows, summary, measured.result, out)
