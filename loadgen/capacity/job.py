"""`loadgen capacity` as a job: per variant of a deployment, its server started, and the highest
load (users, requests/s, or a trace's speed) that meets the SLOs found by
loadgen.capacity.search's search, each probe a sweep cell whose results are kept
(OUTPUT/VARIANT/LEVEL-N/), judged by the SLOs or as MLPerf's server scenario
(loadgen.capacity.mlperf); then the recommendation (docs/check.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.capacity import mlperf
from loadgen.capacity import search as cap
from loadgen.errors import LoadgenError
from loadgen.measures import slo
from loadgen.options import CapacityOptions
from loadgen.outputs import journal as journals
from loadgen.planning.plan import Cell, Plan
from loadgen.results import store
from loadgen.run.target import with_time_scale
from loadgen.sweep import cell as cellrun
from loadgen.sweep.cell import run_cell, workloads_for
from servers import engines


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
    mlperf: str | None = None  # --preset mlperf-server: the benchmark whose limits judge each probe
    note: Callable[[str], None] = lambda _: None

    @property
    def by(self) -> str:
        return {"closed": "concurrency", "open": "rate", "trace": "trace speed"}[self.plan.mode]


@dataclass
class CapacityOutcome:
    results: list[cap.Capacity] = field(default_factory=list)
    recommendation: list[str] = field(default_factory=list)
    by: str = "concurrency"
    details: dict[str, list[str]] = field(default_factory=dict)  # lines under a variant's statement


def _variants(given: str | None, dep) -> list[str]:
    """--variants (all of the deployment's by default), each one it has (DeploymentError)."""
    from servers.deployments import DeploymentError

    variants = given.split(",") if given else list(dep.variants)
    for v in variants:
        if v not in dep.variants:
            raise DeploymentError(f"deployment {dep.name!r} has no variant {v!r}; it has {', '.join(dep.variants)}")
    return variants


def capacity_job(o: CapacityOptions, note: Callable[[str], None] = lambda _: None) -> CapacityJob:
    """`loadgen capacity`'s options as a CapacityJob: every option checked, in one line each,
    before any server starts."""
    from loadgen.load.timescale import TimeScaleError, parse_scale
    from loadgen.options import with_sampling
    from loadgen.run.options import objectives
    from servers.deployments import DeploymentError, load, on_engine
    from workloads import WorkloadError, open_workload

    preset = _preset(o)
    targets = slo.parse_all(o.slo_texts) if preset is None else []
    try:
        goodput = objectives([o.goodput] if o.goodput else [])
        dep = on_engine(load(o.servers), o.engine)
        variants = _variants(o.variants, dep)
        workload = with_sampling(o.workload, o)
        open_workload(workload, data_dir=o.data_dir)  # a bad one is said before any server starts
        time_scale = parse_scale(o.time_scale)
    except (DeploymentError, WorkloadError, TimeScaleError) as e:
        raise LoadgenError(str(e)) from None
    if time_scale is not None and not engines.emulates(dep.engine):
        raise LoadgenError(
            f"--time-scale runs the emulated GPU slower; deployment {dep.name!r} runs on "
            f"{dep.engine}, whose hardware keeps its own time: drop --time-scale (or add "
            "--engine emulator)"
        )
    if any(s.metric == "goodput" for s in targets) and not goodput:
        raise LoadgenError("--slo goodput needs per-request objectives: add --goodput 'ttft<=2s,tpot<=50ms'")
    mode, shape = _mode(o, preset)
    duration, start = o.duration, o.start if o.start is not None else 1.0
    if preset is not None:
        duration = o.duration or mlperf.MIN_DURATION_S
        start = o.start if o.start is not None else mlperf.lowest_rate(duration)
        if start < mlperf.lowest_rate(duration, margin=False):
            raise LoadgenError(
                f"--start {start:g}: a {duration:g} s probe at that rate is expected to send fewer than the "
                f"{mlperf.min_passing(0)} requests MLPerf's early stopping needs; start at "
                f"{mlperf.lowest_rate(duration):g} or more (or give a longer --duration)"
            )
    if not 0 < start <= o.limit:
        raise LoadgenError(f"--start {start:g} must be > 0 and at most --limit {o.limit:g}")
    sending = duration
    if preset is not None and duration is not None:  # past min_duration: LoadGen's last query lands there
        sending = duration + 10 / start  # no arrival in 10 mean gaps: e^-10 at the lowest rate probed
    plan = Plan(
        deployment=o.servers,
        engine=o.engine,
        variants=variants,
        workloads=[workload],
        workload_labels=[o.workload.split(",")[0]],
        mode=mode,
        levels=[start],
        num_requests=o.num_requests,
        duration_s=sending,
        warmup=o.warmup,
        seed=o.seed,
        data_dir=o.data_dir,
        baseline=o.baseline,
        min_requests=20 if mode == "closed" else 40,
        time_scale=time_scale,
        shape=shape,
    )
    if preset is not None and duration is not None and duration < mlperf.MIN_DURATION_S:
        note(
            f"--duration {duration:g}: shorter than MLPerf's {mlperf.MIN_DURATION_S:g} s, so no probe is a valid "
            "MLPerf run (each says so); the latency limits and early stopping are judged as MLPerf does"
        )
    out = o.output or Path("results") / time.strftime("capacity-%Y%m%d-%H%M%S")
    return CapacityJob(
        plan,
        targets,
        Path(out),
        start=start,
        limit=o.limit,
        resolution=o.resolution,
        repeats=o.repeats or (1 if preset else 3),
        goodput=goodput,
        mlperf=preset,
        note=note,
    )


def _preset(o: CapacityOptions) -> str | None:
    """--preset mlperf-server's benchmark (whose limits apply), its conflicts refused in one line."""
    if o.preset is None:
        if o.mlperf_benchmark:
            raise LoadgenError("--mlperf-benchmark picks the limits of --preset mlperf-server: add that preset")
        return None
    given = [
        flag
        for flag, value in (
            ("--slo", o.slo_texts),
            ("--goodput", o.goodput),
            ("--trace", o.trace),
            ("--num-requests", o.num_requests),
            ("--by concurrency", o.by == "concurrency"),
        )
        if value
    ]
    if given:
        raise LoadgenError(
            f"--preset mlperf-server sets the load (Poisson arrivals for --duration, 600 s by default) and the "
            f"SLOs (the p99 TTFT/TPOT limits of --mlperf-benchmark): drop {', '.join(given)}"
        )
    return o.mlperf_benchmark or mlperf.DEFAULT_BENCHMARK


def _mode(o: CapacityOptions, preset: str | None) -> tuple[str, dict | None]:
    """What the search varies (closed: users, open: requests/s, trace: the trace's speed) and, for
    a trace, its shape's options (the speed set per probe)."""
    if o.trace is None:
        for flag, value in (("--trace-start", o.trace_start), ("--trace-window", o.trace_window)):
            if value is not None:
                raise LoadgenError(f"{flag} picks a window of --trace: add --trace FORMAT:PATH")
        return ("open" if preset or o.by == "rate" else "closed"), None
    if o.by is not None:
        raise LoadgenError(f"--trace searches the trace's speed: drop --by {o.by}")
    if o.duration is not None:
        raise LoadgenError(
            "--trace replays the trace's window (--trace-start, --trace-window, --num-requests), not a --duration: "
            "drop --duration"
        )
    from loadgen.shapes import options as shape_options

    given = {"trace": o.trace, "trace_start": o.trace_start, "trace_window": o.trace_window}
    shape = {k: v for k, v in given.items() if v is not None}
    shape_options.from_options(shape_options.options(**shape))  # checked now, as loadgen run checks it
    return "trace", shape


def find_capacity(job: CapacityJob) -> CapacityOutcome:
    from servers.deployments import DeploymentError, default_port, render
    from servers.launcher import LaunchError, Server, free_port

    plan = job.plan
    try:
        dep = plan.deployment_object()
    except DeploymentError as e:
        raise LoadgenError(str(e)) from None
    workload = workloads_for(plan)[plan.workload_labels[0]]  # a trace's window, its text from the workload
    try:
        out = store.prepare(job.output)
    except store.OutputError as e:
        raise LoadgenError(str(e)) from None
    closed = plan.mode == "closed"
    outcome = CapacityOutcome(by=job.by)
    for variant in plan.variants:
        launch = render(dep, variant, port=default_port(dep.engine) or free_port())
        if plan.time_scale is not None:
            launch = with_time_scale(launch, float(plan.time_scale))
        job.note(f"{variant}: searching {job.by} {job.start:g}..{job.limit:g}")
        try:
            with Server(launch, out / "servers" / f"{variant}.log", progress=job.note) as srv:
                probe = _probe(job, variant, workload, srv.launch.url, launch.served_model_name, out)
                found = cap.search(
                    variant,
                    probe,
                    start=job.start,
                    limit=job.limit,
                    integer=closed,
                    resolution=job.resolution,
                    repeats=job.repeats,
                )
                outcome.results.append(found)
                if job.mlperf:
                    outcome.details[variant] = _mlperf_lines(found)
        except LaunchError as e:
            job.note(f"{variant}: {e}; left out")
    outcome.recommendation = cap.recommend(outcome.results, plan.baseline)
    store.write_json(
        out / "capacity.json",
        {
            "slos": [s.text for s in job.slos],
            "by": job.by,
            "trace": plan.shape,  # the trace and its window (its speed is each probe's level)
            "preset": _preset_record(job),
            "workload": plan.workloads[0],
            "deployment": dep.name,
            "results": [
                {
                    "variant": r.variant,
                    "capacity": r.capacity,
                    "statement": r.statement,
                    "sure": r.sure,
                    "probes": [p.__dict__ for p in r.probes],
                    "details": outcome.details.get(r.variant, []),
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
        at = cellrun.Server(url, model, goodput=job.goodput, time_scale=plan.scale_for(cell))
        res = run_cell(plan, cell, workload, at, journal=where)
        if res is None:
            raise KeyboardInterrupt
        store.write_summary(where, res.summary)
        verdict = None
        if job.mlperf:
            verdict = mlperf.judge(res.frame, job.mlperf, mlperf.MIN_DURATION_S)
            failing = verdict.failing()
            store.write_json(where / "mlperf.json", verdict.to_dict())
        else:
            failing = [v.slo for v in slo.judge(res.summary, job.slos) if not v.passed]
        job.note(f"  {variant} at {level:g}: {'holds' if not failing else 'fails ' + '; '.join(failing)}")
        return cap.Probe(
            level,
            not failing,
            res.summary.get("output_throughput_tok_s"),
            failing,
            verdict.to_dict() if verdict else None,
        )

    return probe


def _preset_record(job: CapacityJob) -> dict | None:
    """capacity.json's account of --preset mlperf-server: what each probe was held to."""
    if not job.mlperf:
        return None
    ttft, tpot = mlperf.LIMITS_MS[job.mlperf]
    return {
        "name": "mlperf-server",
        "benchmark": job.mlperf,
        "ttft_p99_limit_ms": ttft,
        "tpot_p99_limit_ms": tpot,
        "percentile": mlperf.PERCENTILE,
        "early_stopping": {"confidence": mlperf.CONFIDENCE, "tolerance": mlperf.TOLERANCE},
        "arrivals": "poisson",
        "probe_sending_s": job.plan.duration_s,  # a little past it: LoadGen's last query lands there
        "min_duration_s": mlperf.MIN_DURATION_S,
    }


def _mlperf_lines(found: cap.Capacity) -> list[str]:
    """Under a variant's statement: MLPerf's verdict at its capacity, and why the next rate failed."""
    held = [p for p in found.probes if p.passed and p.level == found.capacity and p.detail]
    above = [p for p in found.probes if found.capacity is None or p.level > found.capacity]
    failed = [p for p in above if not p.passed and p.detail]
    out = []
    if held:
        out.append(f"at {held[-1].level:g} req/s: " + (held[-1].detail or {})["statement"])
    if failed:
        first = min(failed, key=lambda p: p.level)
        out.append(f"at {first.level:g} req/s it fails: " + "; ".join(first.failing))
    return out
