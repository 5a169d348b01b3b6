"""`loadgen capacity`: for each variant of a deployment, the highest load that meets the SLOs,
and a recommendation (docs/check.md). Every probe's results are kept in --output."""
from __future__ import annotations

import time
from pathlib import Path

import click

from loadgen import capacity as cap
from loadgen import gate, store
from loadgen.cli import options
from loadgen.cli.app import Failure, main
from loadgen.cli.check import slos
from loadgen.target import with_time_scale
from loadgen.timescale import TimeScaleError, parse_scale
from loadgen.sweep.cell import run_cell
from loadgen.sweep.plan import Cell, Plan


def _probe(plan: Plan, variant: str, workload, url: str, model: str, targets, goodput, out: Path):
    count: dict[float, int] = {}

    def probe(level: float) -> cap.Probe:
        count[level] = count.get(level, 0) + 1
        cell = Cell(variant, plan.workload_labels[0], level, plan.mode)
        res = run_cell(plan, cell, workload, url, model, goodput=goodput, time_scale=plan.scale_for(cell))
        if res is None:
            raise KeyboardInterrupt
        where = out / variant / f"{cell.level_label}-{count[level]}"
        where.mkdir(parents=True, exist_ok=True)
        store.write_requests(where, res.frame)
        store.write_summary(where, res.summary)
        verdicts = gate.judge(res.summary, targets)
        failing = [v.slo for v in verdicts if not v.passed]
        click.echo(f"  {variant} at {level:g}: {'holds' if not failing else 'fails ' + ', '.join(failing)}", err=True)
        return cap.Probe(level, not failing, res.summary.get("output_throughput_tok_s"), failing)
    return probe


@main.command()
@click.option("--servers", required=True, help="Deployment: a catalog name or a TOML file.")
@click.option("--engine", type=click.Choice(["vllm", "emulator", "llama.cpp", "external"]),
              help="Override the deployment's engine (emulator: no GPU).")
@click.option("--variants", help="Comma-separated variants [default: all].")
@click.option("--workload", default="chat", show_default=True, help="One workload spec (loadgen workloads list).")
@click.option("--data-dir", envvar="LOADGEN_DATA_DIR", help="Where catalog workloads find local data sets.")
@click.option("--slo", "slo_texts", multiple=True, help="An SLO as for loadgen check; repeat for more.")
@click.option("--goodput", help="Per-request objectives for a goodput SLO, e.g. 'ttft<=2s,tpot<=50ms'.")
@click.option("--by", type=click.Choice(["concurrency", "rate"]), default="concurrency", show_default=True,
              help="Search concurrency (closed loop) or arrival rate in requests/s (open loop, Poisson).")
@click.option("--start", type=float, default=1.0, show_default=True, help="The first level tried.")
@click.option("--limit", type=float, default=256.0, show_default=True, help="The highest level tried.")
@click.option("--resolution", type=float, default=0.1, show_default=True,
              help="Rate search: stop bisecting when the bracket is this share of the level.")
@click.option("--repeats", type=click.IntRange(1, 9), default=3, show_default=True,
              help="Runs at each boundary level (the capacity, and the first level that failed).")
@click.option("--num-requests", type=click.IntRange(min=1), help="Measured requests per probe "
              "[default: max(20, 4 x concurrency); rate: 40].")
@click.option("--duration", type=float, help="Seconds of sending per probe instead.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--baseline", default="baseline", show_default=True, help="The variant without SD.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--time-scale", help="On the emulator: run the emulated GPU S times slower than its model, for a "
              "machine that cannot keep its pace; every figure is in the emulated hardware's time [default: 1].")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path),
              help="Results directory [default: results/capacity-YYYYmmdd-HHMMSS].")
def capacity(**o) -> None:
    """Find, per variant, the highest concurrency (or rate) that meets the SLOs: doubling,
    bisection, repeats at the boundary; then recommend a variant and where SD should be off."""
    from servers.deployments import DeploymentError, load, render
    from servers.launcher import LaunchError, Server, free_port
    from workloads import WorkloadError, open_workload
    targets = slos(o["slo_texts"])
    try:
        goodput = options.objectives({"goodput_specs": [o["goodput"]] if o["goodput"] else []})
        dep = load(o["servers"]).with_engine(o["engine"])
        variants = o["variants"].split(",") if o["variants"] else list(dep.variants)
        for v in variants:
            if v not in dep.variants:
                raise DeploymentError(f"deployment {dep.name!r} has no variant {v!r}; it has {', '.join(dep.variants)}")
        workload = open_workload(o["workload"], data_dir=o["data_dir"])
    except (DeploymentError, WorkloadError) as e:
        raise Failure(str(e)) from None
    try:
        time_scale = parse_scale(o["time_scale"])
    except TimeScaleError as e:
        raise click.UsageError(str(e)) from None
    if time_scale is not None and dep.engine != "emulator":
        raise click.UsageError(f"--time-scale runs the emulated GPU slower; deployment {dep.name!r} runs on "
                               f"{dep.engine}, whose hardware keeps its own time: drop --time-scale (or add "
                               "--engine emulator)")
    if any(s.metric == "goodput" for s in targets) and not goodput:
        raise click.UsageError("--slo goodput needs per-request objectives: add --goodput 'ttft<=2s,tpot<=50ms'")
    closed = o["by"] == "concurrency"
    if not 0 < o["start"] <= o["limit"]:
        raise click.UsageError(f"--start {o['start']:g} must be > 0 and at most --limit {o['limit']:g}")
    out = o["output"] or Path("results") / time.strftime("capacity-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    plan = Plan(deployment=o["servers"], engine=o["engine"], variants=variants, workloads=[o["workload"]],
                workload_labels=[o["workload"].split(",")[0]], mode="closed" if closed else "open", levels=[],
                num_requests=o["num_requests"], duration_s=o["duration"], warmup=o["warmup"], seed=o["seed"],
                data_dir=o["data_dir"], baseline=o["baseline"], min_requests=20 if closed else 40,
                time_scale=time_scale)
    results = []
    for variant in variants:
        launch = render(dep, variant, port=8000 if dep.engine == "vllm" else free_port())
        if time_scale is not None:
            launch = with_time_scale(launch, time_scale)
        click.echo(f"{variant}: searching {o['by']} {o['start']:g}..{o['limit']:g}", err=True)
        try:
            with Server(launch, out / "servers" / f"{variant}.log") as srv:
                probe = _probe(plan, variant, workload, srv.launch.url, launch.served_model_name, targets, goodput, out)
                results.append(cap.search(variant, probe, start=o["start"], limit=o["limit"], integer=closed,
                                          resolution=o["resolution"], repeats=o["repeats"]))
        except LaunchError as e:
            click.echo(f"{variant}: {e}; left out", err=True)
    lines = [f"{r.variant:<16} {r.statement}" for r in results]
    lines += [""] + cap.recommend(results, o["baseline"])
    click.echo("\n".join(lines))
    store.write_json(out / "capacity.json", {
        "slos": [s.text for s in targets], "by": o["by"], "workload": o["workload"], "deployment": dep.name,
        "results": [{"variant": r.variant, "capacity": r.capacity, "statement": r.statement, "sure": r.sure,
                     "probes": [p.__dict__ for p in r.probes]} for r in results],
        "recommendation": cap.recommend(results, o["baseline"])})
    click.echo(f"\nResults: {out / 'capacity.json'}, every probe in {out}/VARIANT/LEVEL-N/", err=True)
    if not results:
        raise Failure("no variant's server could be started", code=2)
