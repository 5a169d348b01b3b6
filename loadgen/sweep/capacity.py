"""`loadgen capacity` as a job: per variant of a deployment, its server started, and the highest
load that meets the SLOs found by loadgen.capacity's search, each probe a sweep cell whose
results are kept (OUTPUT/VARIANT/LEVEL-N/); then the recommendation (docs/check.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from loadgen import capacity as cap, gate, store
from loadgen.errors import LoadgenError
from loadgen.sweep.cell import run_cell
from loadgen.sweep.plan import Cell, Plan
from loadgen.target import with_time_scale


@dataclass
class CapacityJob:
    plan: Plan                      # the deployment, variants, one workload, mode; levels unused
    slos: list                      # loadgen.gate SLOs
    output: Path
    start: float = 1.0
    limit: float = 256.0
    resolution: float = 0.1
    repeats: int = 3
    goodput: dict | None = None     # per-request objectives, for a goodput SLO
    note: Callable[[str], None] = lambda _: None


@dataclass
class CapacityOutcome:
    results: list[cap.Capacity] = field(default_factory=list)
    recommendation: list[str] = field(default_factory=list)


def find_capacity(job: CapacityJob) -> CapacityOutcome:
    from servers.deployments import DeploymentError, default_port, load, render
    from servers.launcher import LaunchError, Server, free_port
    from workloads import WorkloadError, open_workload
    plan = job.plan
    try:
        dep = load(plan.deployment).with_engine(plan.engine)
        workload = open_workload(plan.workloads[0], data_dir=plan.data_dir)
    except (DeploymentError, WorkloadError) as e:
        raise LoadgenError(str(e)) from None
    try:
        out = store.prepare(job.output)
    except store.OutputError as e:
        raise LoadgenError(str(e)) from None
    closed = plan.mode == "closed"
    outcome = CapacityOutcome()
    for variant in plan.variants:
        launch = render(dep, variant, port=default_port(dep.engine) or free_port())
        if plan.time_scale is not None:
            launch = with_time_scale(launch, plan.time_scale)
        job.note(f"{variant}: searching {'concurrency' if closed else 'rate'} {job.start:g}..{job.limit:g}")
        try:
            with Server(launch, out / "servers" / f"{variant}.log") as srv:
                probe = _probe(job, variant, workload, srv.launch.url, launch.served_model_name, out)
                outcome.results.append(cap.search(variant, probe, start=job.start, limit=job.limit, integer=closed,
                                                  resolution=job.resolution, repeats=job.repeats))
        except LaunchError as e:
            job.note(f"{variant}: {e}; left out")
    outcome.recommendation = cap.recommend(outcome.results, plan.baseline)
    store.write_json(out / "capacity.json", {
        "slos": [s.text for s in job.slos], "by": "concurrency" if closed else "rate",
        "workload": plan.workloads[0], "deployment": dep.name,
        "results": [{"variant": r.variant, "capacity": r.capacity, "statement": r.statement, "sure": r.sure,
                     "probes": [p.__dict__ for p in r.probes]} for r in outcome.results],
        "recommendation": outcome.recommendation})
    return outcome


def _probe(job: CapacityJob, variant: str, workload, url: str, model: str, out: Path):
    plan, count = job.plan, {}

    def probe(level: float) -> cap.Probe:
        count[level] = count.get(level, 0) + 1
        cell = Cell(variant, plan.workload_labels[0], level, plan.mode)
        res = run_cell(plan, cell, workload, url, model, goodput=job.goodput, time_scale=plan.scale_for(cell))
        if res is None:
            raise KeyboardInterrupt
        where = out / variant / f"{cell.level_label}-{count[level]}"
        where.mkdir(parents=True, exist_ok=True)
        store.write_requests(where, res.frame)
        store.write_summary(where, res.summary)
        verdicts = gate.judge(res.summary, job.slos)
        failing = [v.slo for v in verdicts if not v.passed]
        job.note(f"  {variant} at {level:g}: {'holds' if not failing else 'fails ' + ', '.join(failing)}")
        return cap.Probe(level, not failing, res.summary.get("output_throughput_tok_s"), failing)
    return probe
