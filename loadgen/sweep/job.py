"""A sweep, run: from a plan (or a results directory whose sweep is continued) to every cell on
disk and the cell table. `loadgen sweep` and `loadgen.api.sweep` are this plus their output;
the worker processes of a --parallel sweep run `python -m loadgen.sweep.worker` (`run_worker`)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from loadgen.errors import LoadgenError
from loadgen.planning.plan import Plan
from loadgen.results import cells, manifest, store
from loadgen.sweep.cell import workloads_for
from loadgen.sweep.parallel import run_parallel, worker_slot
from loadgen.sweep.progress import BarReporter, LiveReporter
from loadgen.sweep.slots import Interrupted, Reporter, pending, run_slot, slots
from servers import engines
from servers.deployments import DeploymentError

Note = Callable[[str], None]


@dataclass
class SweepJob:
    """`plan`: a new sweep into `output`; None: continue the one there (`resume`)."""

    output: str | Path
    plan: Plan | None = None
    retry_failed: bool = False
    api_key: str | None = None
    ray_address: str | None = None  # None: no Ray; "": RAY_ADDRESS, this host's, else a new one
    ray_resource: str | None = None  # None: the engine's (servers/engines: GPU for vLLM, else CPU)
    metrics_port: int | None = None  # the client's live metrics for Prometheus
    quiet: bool = True  # no progress bar
    note: Note = lambda _: None  # what a person should know (stderr in the CLI)
    argv: list[str] = field(default_factory=list)  # recorded in the manifest
    host: dict = field(default_factory=dict)


@dataclass
class SweepOutcome:
    output: Path
    plan: Plan
    table: pd.DataFrame  # one row per finished cell (cells.parquet)
    interrupted: bool

    @property
    def complete(self) -> bool:
        """Every planned cell finished, and ok."""
        return len(self.table) == len(self.plan.cells()) and bool((self.table["status"] == "ok").all())


def open_workloads(plan: Plan) -> dict:
    return workloads_for(plan)


def check_engine(dep, plan: Plan) -> None:
    """The deployment's engine is installed here (one line naming the fix if not)."""
    problem = engines.get(dep.engine).install_problem(dep, plan.executable)
    if problem:
        raise LoadgenError(problem)


def _check_virtual(job: SweepJob, plan) -> None:
    """A virtual plan runs every cell in this process (the plan's own options are checked in
    planning._check_virtual); how the job would run it otherwise is refused, also on --resume."""
    if plan.virtual:
        for flag, given, why in (
            ("ray", job.ray_address is not None, "it runs in this process"),
            ("metrics-port", job.metrics_port is not None, "no live load to watch"),
        ):
            if given:
                raise LoadgenError(f"--{flag} does not apply to --virtual ({why}): drop one of them")


def sweep(job: SweepJob) -> SweepOutcome:
    """Run every pending cell; the table of what finished (interrupted: what is there)."""
    try:
        out = store.prepare(job.output)
    except store.OutputError as e:
        raise LoadgenError(str(e)) from None
    stored = manifest.read(out)
    if stored is not None and job.plan is not None:
        raise LoadgenError(
            f"{out} already holds a sweep ({len(cells.finished(out))} cells done); add --resume "
            "to continue it, or choose a new --output"
        )
    if stored is None and job.plan is None:
        raise LoadgenError(f"nothing to resume in {out}: no {cells.MANIFEST}; run the sweep without --resume")
    if stored is None:
        plan = job.plan
        assert plan is not None  # a new sweep has one (checked above)
        _check_virtual(job, plan)
        dep = _deployment(plan)
        check_engine(dep, plan)
        cluster = _join_ray(job, plan, dep)  # before anything is written: a bad address leaves nothing
        probe = _choose_time_scales(job, plan, dep, open_workloads(plan), out, cluster is not None)
        try:
            manifest.write(out, plan, dep, job.argv, job.host, time_scale_probe=probe)
        except DeploymentError as e:  # a variant that cannot be rendered (a packaged model not installed)
            raise LoadgenError(str(e)) from None
    else:
        plan, dep = _stored(out, stored)
        _check_virtual(job, plan)
        cluster = _join_ray(job, plan, dep)
        manifest.note_resume(out, stored, job.argv)
    cells.clean_partial(out)
    for m in plan.profile_mismatch or []:
        job.note(f"PROFILE MISMATCH (--profile-anyway): {m}")
    workloads = open_workloads(plan)
    for said in _acceptance_notes(plan, dep, workloads):
        job.note(f"note: {said}")
    for w in workloads.values():
        if w.notice:
            job.note(f"note: {w.notice}")
    if dep.output and not plan.virtual:
        job.note(
            f"note: deployment {dep.name} answers output={dep.output} to a workload that sets no output= "
            "(its `output`; give WORKLOAD,output=... to choose)"
        )
    order = [c.key for c in plan.cells()]
    todo = pending(out, plan, job.retry_failed)
    done_before = len(order) - len(todo)
    job.note(
        ("Virtual sweep (every cell simulated, no server): " if plan.virtual else "Sweep: ")
        + f"{len(plan.variants)} variants x {len(plan.workloads)} workloads x "
        f"{len(plan.levels)} levels"
        + (f" x {plan.repeats} repeats" if plan.repeats > 1 else "")
        + f" = {len(order)} cells"
        + (f" ({done_before} already done)" if done_before else "")
        + f"; servers: {dep.name} on {dep.engine}; results in {out}"
    )
    if cluster is not None:
        interrupted = _run_on_ray(job, cluster, out, plan, dep, todo, order)
    else:
        interrupted = _run_here(job, out, plan, dep, todo, workloads, order)
    return SweepOutcome(out, plan, cells.rebuild_table(out, order), interrupted)


def _acceptance_notes(plan: Plan, dep, workloads: dict) -> list[str]:
    """Where an emulated variant's acceptance is shared with another drafter or borrowed from
    another model's data, for the kinds of request the workloads hold (a few of each read)."""
    from loadgen.planning.profiles import acceptance_notes, prompt_texts

    prompts = {label: prompt_texts(w, plan.seed) for label, w in workloads.items()}
    return acceptance_notes(dep, plan.variants, prompts)


def _deployment(plan: Plan):
    try:
        return plan.deployment_object()
    except DeploymentError as e:
        raise LoadgenError(str(e)) from None


def _stored(out: Path, stored: dict):
    try:
        plan = Plan.from_dict(stored["plan"])
        return plan, plan.deployment_object()
    except (TypeError, KeyError, DeploymentError) as e:
        raise LoadgenError(f"cannot continue the sweep in {out}: {e}") from None


def _choose_time_scales(job: SweepJob, plan: Plan, dep, workloads: dict, out: Path, ray: bool) -> dict | None:
    """With time scale auto, probe this machine and set plan.time_scales; the probe's record."""
    if plan.time_scale != "auto":
        if plan.time_scale is not None:
            job.note(
                f"time scale: the emulated GPU runs {plan.time_scale:g}x slower than its model "
                "(--time-scale); every figure is in its own time"
            )
        return None
    if ray:
        job.note(
            "time scale: 1x (--time-scale auto probes this machine, and the cells run on the Ray "
            "cluster's; give --time-scale S to dilate them)"
        )
        return None
    if plan.mode == "trace":
        job.note(
            "time scale: 1x (--time-scale auto probes steady loads, and a trace's bursts are not one; give "
            "--time-scale S to dilate a trace sweep; each cell's server_behind says whether the emulator kept up)"
        )
        return None
    from loadgen.planning.probe import ProbeError, decided, describe, run_probe

    job.note("time scale: probing what this machine holds in real time ...")
    try:
        chosen, record = run_probe(
            plan,
            dep,
            workloads[plan.workload_labels[0]],
            out / "servers",
            slots=len(slots(plan, dep)),
            api_key=job.api_key,
        )
    except ProbeError as e:
        raise LoadgenError(f"--time-scale auto: the probe failed ({e}); give --time-scale S instead") from None
    plan.time_scales = chosen
    job.note(
        f"time scale (auto, probed in {record['wall_s']:.0f} s): {describe(chosen)}: the emulated GPU runs "
        f"that many times slower than its model, every figure is in its own time. Decided {decided(record)} "
        f"(limits: each process busy at most {record['busy_limit']:.0%}; per step at most "
        f"{record['step_limit_s'] * 1e3:g} ms of work, client loop lag p99 at most "
        f"{record['lag_limit_s'] * 1e3:g} ms, emulated)"
    )
    return record


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _run_here(job: SweepJob, out: Path, plan: Plan, dep, todo, workloads, order) -> bool:
    """The pending cells on this host (slot by slot in worker processes with --parallel); True
    when interrupted. SIGTERM is handled like Ctrl-C, so the servers are stopped on every way out."""
    live = _live(job, plan)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    reporter: Reporter = BarReporter(len(todo), quiet=job.quiet)
    if live is not None:
        reporter = LiveReporter(reporter, live, dep.served_model_name, len(order))
    try:
        the_slots = slots(plan, dep)
        if len(the_slots) > 1:
            return run_parallel(out, the_slots, reporter, job.retry_failed, job.api_key)
        run_slot(out, plan, dep, the_slots[0], todo, workloads, reporter, order, job.api_key)
        return False
    except (Interrupted, KeyboardInterrupt):
        return True
    finally:
        reporter.close()
        signal.signal(signal.SIGTERM, previous)
        if live is not None:
            live.close()


def _live(job: SweepJob, plan: Plan):
    if job.metrics_port is None:
        return None
    if plan.parallel:
        raise LoadgenError(
            "--metrics-port is not available with --parallel (the workers are separate processes); drop one of them"
        )
    from loadgen.outputs import live

    return live.serve(job.metrics_port)


def _ray_resource(job: SweepJob, dep) -> str:
    from loadgen.backends.raycluster import default_resource

    return job.ray_resource or default_resource(dep.engine)


def _join_ray(job: SweepJob, plan: Plan, dep):
    """With Ray asked for: the joined cluster (Ray's module, initialised), else None."""
    if job.ray_address is None:
        return None
    from loadgen.backends.raycluster import ClusterError, connect

    if job.metrics_port is not None:
        raise LoadgenError(
            "--metrics-port is not available with --ray (the load runs on the cluster's nodes); drop one of them"
        )
    if plan.parallel:
        raise LoadgenError("--ray places the variants on the cluster's GPUs itself; drop --parallel")
    try:
        return connect(job.ray_address or None, _ray_resource(job, dep), dep.tensor_parallel_size)
    except ClusterError as e:
        raise LoadgenError(str(e)) from None


def _run_on_ray(job: SweepJob, ray, out: Path, plan: Plan, dep, todo, order) -> bool:
    from loadgen.backends.raycluster import ClusterError
    from loadgen.sweep.cluster import run_on_ray

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    reporter = BarReporter(len(todo), quiet=job.quiet)
    try:
        return run_on_ray(ray, out, plan, dep, todo, reporter, order, _ray_resource(job, dep), job.api_key)
    except ClusterError as e:
        raise LoadgenError(str(e)) from None
    finally:
        reporter.close()
        signal.signal(signal.SIGTERM, previous)
        ray.shutdown()


def run_worker(output: str | Path, spec: str, api_key: str | None = None) -> bool:
    """One slot of a --parallel sweep in `output` (started by loadgen.sweep.parallel); True when
    interrupted."""
    out = Path(output)
    stored = manifest.read(out)
    if stored is None:
        raise LoadgenError(f"nothing to run in {out}: no {cells.MANIFEST}")
    plan, dep = _stored(out, stored)
    workloads = open_workloads(plan)
    order = [c.key for c in plan.cells()]
    slot, retry_failed = worker_slot(spec)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    todo = [c for c in pending(out, plan, retry_failed) if c.variant in slot.variants]
    try:
        run_slot(out, plan, dep, slot, todo, workloads, BarReporter(0, quiet=True), order, api_key)
        return False
    except (Interrupted, KeyboardInterrupt):
        return True
    finally:
        signal.signal(signal.SIGTERM, previous)
