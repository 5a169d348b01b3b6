"""`loadgen capacity`: for each variant of a deployment, the highest load that meets the SLOs,
and a recommendation (docs/check.md). Every probe's results are kept in --output."""

from __future__ import annotations

from pathlib import Path

import click

from loadgen import api
from loadgen.cli import options
from loadgen.cli.app import Failure, main


@main.command()
@click.option("--servers", required=True, help="Deployment: a catalog name or a TOML file.")
@click.option(
    "--engine",
    type=click.Choice(["vllm", "emulator", "llama.cpp", "external"]),
    help="Override the deployment's engine (emulator: no GPU).",
)
@click.option("--variants", help="Comma-separated variants [default: all].")
@click.option("--workload", default="chat", show_default=True, help="One workload spec (loadgen workloads list).")
@click.option("--data-dir", envvar="LOADGEN_DATA_DIR", help="Where catalog workloads find local data sets.")
@click.option("--slo", "slo_texts", multiple=True, help="An SLO as for loadgen check; repeat for more.")
@click.option("--goodput", help="Per-request objectives for a goodput SLO, e.g. 'ttft<=2s,tpot<=50ms'.")
@click.option(
    "--by",
    type=click.Choice(["concurrency", "rate"]),
    default="concurrency",
    show_default=True,
    help="Search concurrency (closed loop) or arrival rate in requests/s (open loop, Poisson).",
)
@click.option("--start", type=float, default=1.0, show_default=True, help="The first level tried.")
@click.option("--limit", type=float, default=256.0, show_default=True, help="The highest level tried.")
@click.option(
    "--resolution",
    type=float,
    default=0.1,
    show_default=True,
    help="Rate search: stop bisecting when the bracket is this share of the level.",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, 9),
    default=3,
    show_default=True,
    help="Runs at each boundary level (the capacity, and the first level that failed).",
)
@click.option(
    "--num-requests",
    type=click.IntRange(min=1),
    help="Measured requests per probe [default: max(20, 4 x concurrency); rate: 40].",
)
@click.option("--duration", type=float, help="Seconds of sending per probe instead.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--baseline", default="baseline", show_default=True, help="The variant without SD.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--time-scale",
    help="On the emulator: run the emulated GPU S times slower than its model, for a "
    "machine that cannot keep its pace; every figure is in the emulated hardware's time [default: 1].",
)
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results directory [default: results/capacity-YYYYmmdd-HHMMSS].",
)
def capacity(**o) -> None:
    """Find, per variant, the highest concurrency (or rate) that meets the SLOs: doubling,
    bisection, repeats at the boundary; then recommend a variant and where SD should be off."""
    job = api.capacity_job(options.build(api.CapacityOptions, o), note=options.note)
    found, out = api.capacity(job), job.output
    lines = [f"{r.variant:<16} {r.statement}" for r in found.results]
    lines += [""] + found.recommendation
    click.echo("\n".join(lines))
    click.echo(f"\nResults: {out / 'capacity.json'}, every probe in {out}/VARIANT/LEVEL-N/", err=True)
    if not found.results:
        raise Failure("no variant's server could be started", code=2)
