"""`loadgen capacity` as a job: per variant of a deployment, its server started, and the highest
load that meets the SLOs found by loadgen.capacity.search's search, each probe a sweep cell whose
results are kept (OUTPUT/VARIANT/LEVEL-N/); then the recommendation (docs/check.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.capacity import search as cap
from loadgen.errors import LoadgenError
from loadgen.measures import slo
from loadgen.options import CapacityOptions
from loadgen.outputs import journal as journals
from loadgen.planning.plan import Cell, Plan
from loadgen.results import store
from loadgen.run.target import with_time_scale
from loadgen.sweep.cell import run_cell


@dataclass
class CapacityJob:
    plan: Plan  # the deployment, variants, one workload, mode; levels unused
    slos: list  # loadgen.measures.slo SLOs
    output: Path
    start: float = 1.0
    limit: float = 256.0
    resolution: float = 0.1
    repeats: int = 3
    goodput: dict | None = None  # per-request objectives, for a goodput SLO
    note: Callable[[str], None] = lambda _: None


@dataclass
class CapacityOutcome:
    results: list[cap.Capacity] = field(default_factory=list)
    recommendation: list[str] = field(default_factory=list)


def capacity_job(o: CapacityOptions, note: Callable[[str], None] = lambda _: None) -> CapacityJob:
    """`loadgen capacity`'s options as a CapacityJob: every option checked, in one line each,
    before any server starts."""
    from loadgen.load.timescale import TimeScaleError, parse_scale
    from loadgen.run.options import objectives
    from servers.deployments import DeploymentError, load
    from workloads import WorkloadError, open_workload

    targets = slo.parse_all(o.slo_texts)
    try:
        goodput = objectives([o.goodput] if o.goodput else [])
        dep = load(o.servers).with_engine(o.engine)
        variants = o.variants.split(",") if o.variants else list(dep.variants)
        for v in variants:
            if v not in dep.variants:
                raise DeploymentError(f"deployment {dep.name!r} has no variant {v!r}; it has {', '.join(dep.variants)}")
        open_workload(o.workload, data_dir=o.data_dir)  # a bad one is said before any server starts
        time_scale = parse_scale(o.time_scale)
    except (DeploymentError, WorkloadError, TimeScaleError) as e:
        raise LoadgenError(str(e)) from None
    if time_scale is not None and dep.engine != "emulator":
        raise LoadgenError(
            f"--time-scale runs the emulated GPU slower; deployment {dep.name!r} runs on "
            f"{dep.engine}, whose hardware keeps its own time: drop --time-scale (or add "
            "--engine emulator)"
        )
    if any(s.metric == "goodput" for s in targets) and not goodput:
        raise LoadgenError("--slo goodput needs per-request objectives: add --goodput 'ttft<=2s,tpot<=50ms'")
    closed = o.by == "concurrency"
    if not 0 < o.start <= o.limit:
        raise LoadgenError(f"--start {o.start:g} must be > 0 and at most --limit {o.limit:g}")
    plan = Plan(
        deployment=o.servers,
        engine=o.engine,
        variants=variants,
        workloads=[o.workload],
        workload_labels=[o.workload.split(",")[0]],
        mode="closed" if closed else "open",
        levels=[],
        num_requests=o.num_requests,
        duration_s=o.duration,
        warmup=o.warmup,
        seed=o.seed,
        data_dir=o.data_dir,
        baseline=o.baseline,
        min_requests=20 if closed else 40,
        time_scale=time_scale,
    )
    out = o.output or Path("results") / time.strftime("capacity-%Y%m%d-%H%M%S")
    return CapacityJob(
        plan,
        targets,
        Path(out),
        start=o.start,
        limit=o.limit,
        resolution=o.resolution,
        repeats=o.repeats,
        goodput=goodput,
        note=note,
    )


def find_capacity(job: CapacityJob) -> CapacityOutcome:
    from servers.deployments import DeploymentError, default_port, render
    from servers.launcher import LaunchError, Server, free_port
    from workloads import WorkloadError, open_workload

    plan = job.plan
    try:
        dep = plan.deployment_object()
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
            launch = with_time_scale(launch, float(plan.time_scale))
        job.note(f"{variant}: searching {'concurrency' if closed else 'rate'} {job.start:g}..{job.limit:g}")
        try:
            with Server(launch, out / "servers" / f"{variant}.log") as srv:
                probe = _probe(job, variant, workload, srv.launch.url, launch.served_model_name, out)
                outcome.results.append(
                    cap.search(
                        variant,
                        probe,
                        start=job.start,
                        limit=job.limit,
                        integer=closed,
                        resolution=job.resolution,
                        repeats=job.repeats,
                    )
                )
        except LaunchError as e:
            job.note(f"{variant}: {e}; left out")
    outcome.recommendation = cap.recommend(outcome.results, plan.baseline)
    store.write_json(
        out / "capacity.json",
        {
            "slos": [s.text for s in job.slos],
            "by": "concurrency" if closed else "rate",
            "workload": plan.workloads[0],
            "deployment": dep.name,
            "results": [
                {
                    "variant": r.variant,
                    "capacity": r.capacity,
                    "statement": r.statement,
                    "sure": r.sure,
                    "probes": [p.__dict__ for p in r.probes],
                }
                for r in outcome.results
            ],
            "recommendation": outcome.recommendation,
        },
    )
    return outcome


def _probe(job: CapacityJob, variant: str, workload, url: str, model: str, out: Path):
    plan, count = job.plan, dict[float, int]()

    def probe(level: float) -> cap.Probe:
        count[level] = count.get(level, 0) + 1
        cell = Cell(variant, plan.workload_labels[0], level, plan.mode)
        where = out / variant / f"{cell.level_label}-{count[level]}"
        where.mkdir(parents=True, exist_ok=True)
        journals.clear(where)  # a probe is journaled like a run: its requests written as they end
        res = run_cell(
            plan, cell, workload, url, model, goodput=job.goodput, time_scale=plan.scale_for(cell), journal=where
        )
        if res is None:
            raise KeyboardInterrupt
        store.write_summary(where, res.summary)
        verdicts = slo.judge(res.summary, job.slos)
        failing = [v.slo for v in verdicts if not v.passed]
        job.note(f"  {variant} at {level:g}: {'holds' if not failing else 'fails ' + ', '.join(failing)}")
        return cap.Probe(level, not failing, res.summary.get("output_throughput_tok_s"), failing)

    return probe
