"""One cell of a sweep: a measured run (loadgen.run.measurement, the pipeline `loadgen run` goes
through) with a cell's place: its load and requests from the plan, the warm-up sent apart before
the server's window opens, the emulator's time scale for the level set first, and what the cell
was and how it ended."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from loadgen.load.execute import RunSpec
from loadgen.load.workload import WorkloadRef
from loadgen.measures.reconcile import note_resumed
from loadgen.outputs import journal as journals
from loadgen.planning.plan import Cell, Plan
from loadgen.results.outcome import RunOutcome
from loadgen.run.measurement import RunJob, StoppedEarly, measure
from loadgen.run.target import Target
from loadgen.shapes import Shape
from loadgen.shapes import options as shape_options


def load_shape(plan: Plan, cell: Cell) -> Shape:
    """The cell's load, built by the shape family from options as `loadgen run` builds it: the
    plan's own shape, or the closed or open loop at the cell's level."""
    if plan.shape is not None:
        given = dict(plan.shape)
        if cell.mode == "trace":  # the trace at this cell's speed; --num-requests caps its window
            given["trace_speed"] = cell.level
            return shape_options.from_options(
                shape_options.options(**given), SimpleNamespace(num_requests=plan.num_requests, workers=1)
            )
    elif cell.mode == "closed":
        given = {"concurrency": int(cell.level)}
    else:
        given = {
            "rate": cell.level,
            "arrival": plan.arrival,
            "burstiness": plan.burstiness if plan.arrival == "gamma" else None,
        }
    return shape_options.from_options(shape_options.options(**given))


def workloads_for(plan: Plan) -> dict:
    """Each of the plan's workloads by label, opened as its cells send it: a trace sweep's (mode
    trace) is the trace's window with its text from the workload, as `loadgen run --trace`
    fits it (the same requests at every speed). LoadgenError (one line) for a bad one."""
    from loadgen.errors import LoadgenError
    from loadgen.run.options import fit_to_trace
    from workloads import WorkloadError, open_workload

    out = {}
    trace = load_shape(plan, plan.cells()[0]) if plan.mode == "trace" else None
    for spec, label in zip(plan.workloads, plan.workload_labels):
        try:
            w = open_workload(spec, data_dir=plan.data_dir)
        except WorkloadError as e:
            raise LoadgenError(f"--workloads: {e}") from None
        out[label] = w if trace is None else fit_to_trace(trace, w)
    return out


@dataclass(frozen=True)
class Server:
    """The server a cell runs against and what the run tells whom: its URL and model, the API
    key, the callbacks for each request's start and end, the goodput objectives, and the time
    scale to set first (an emulator's, per sweep level; None: as it runs)."""

    url: str
    model: str
    api_key: str | None = None
    on_record: Callable | None = None
    on_start: Callable | None = None
    goodput: dict | None = None
    time_scale: float | None = None


def cell_job(plan: Plan, cell: Cell, workload, at: Server) -> RunJob:
    """The cell as a measured run's job: the same measured requests in every cell (the plan's
    seed), so variants and levels see the same work."""
    load = load_shape(plan, cell)
    num = plan.requests_for(cell)
    if num is None and cell.mode == "trace":
        num = load.requests()  # the trace's window, every request of it
    spec = RunSpec(
        api_base="",
        model=at.model,
        load=load,
        endpoint=plan.endpoint,
        num_requests=num,
        duration_s=plan.duration_s,
        warmup=plan.warmup,
        seed=plan.seed,
        request_timeout_s=plan.request_timeout_s,
        extra_body=plan.extra_body,
        token_ids=plan.token_ids,
        headers={"Authorization": f"Bearer {at.api_key}"} if at.api_key else {},
        scrape_interval_s=plan.metrics_interval_s,
    )
    return RunJob(
        spec,
        workload,
        Target(at.url),
        model=at.model,
        workers=plan.workers_for(cell),
        workload_ref=WorkloadRef(plan.workload_spec(cell.workload), plan.data_dir),
        objectives=at.goodput,
        kind="sweep",
        warmup_apart=True,
        set_time_scale=at.time_scale,
        probe_required=False,
        on_start=at.on_start,
        on_record=at.on_record,
        config={"warmup_separate": True, "started_unix": time.time(), **speculative(plan, cell)},
    )


def speculative(plan: Plan, cell: Cell) -> dict:
    """The variant's speculative config as the run's config records it: the rule for accepted
    drafts reads from it whether a step may draft nothing (loadgen.measures.reconcile.can_skip)."""
    from servers.deployments import DeploymentError

    try:
        variant = plan.deployment_object().variants.get(cell.variant)
    except DeploymentError:  # a resumed plan whose deployment no longer loads: the weaker rule
        return {}
    spec = getattr(variant, "speculative_config", None)
    return {"speculative_config": json.dumps(spec, separators=(",", ":"))} if spec else {}


def run_cell(plan: Plan, cell: Cell, workload, at: Server, journal: Path | None = None) -> RunOutcome | None:
    """Run the cell (on an emulator, at `time_scale`: set before the cell); None when it was
    interrupted before its measurement began. NotMeasured (loadgen.run.measurement) when it cannot
    be measured at all (its server refused the time scale). With `journal` (its directory in
    progress) its requests are journaled there as they end, and requests.parquet written there;
    a journal already there (the cell was killed) is continued: its requests are not sent again
    and the new ones are journaled as its next part."""
    job = cell_job(plan, cell, workload, at)
    resumed = None
    if journal is not None:
        journal.mkdir(parents=True, exist_ok=True)
        part = journals.parts(journal)
        done = journals.indices(journal) if part else frozenset()
        job.journal = str(journal)
        job.spec.journal_part, job.spec.skip = part, done
        if part:
            resumed = {"parts": part + 1, "requests_before": len(done)}
    try:
        measured = measure(job)
    except StoppedEarly:
        return None
    summary = measured.summary()
    if resumed:
        summary["resumed"] = {
            **resumed,
            "note": "continued after a kill: the requests of every part are measured; the server's window "
            "(spec_decode, server) covers the last part only, and the throughput window spans the gap",
        }
        rec = (summary.get("acceptance_client") or {}).get("reconciliation")
        if rec:
            note_resumed(rec, resumed["requests_before"])
    return RunOutcome(measured.rows, summary, measured.result)
