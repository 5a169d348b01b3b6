"""`loadgen capacity`: for each variant of a deployment, the highest load that meets the SLOs,
and a recommendation (docs/check.md). Every probe's results are kept in --output."""

from __future__ import annotations

from pathlib import Path

import click

from loadgen import api
from loadgen.capacity.mlperf import DEFAULT_BENCHMARK, LIMITS_MS
from loadgen.cli import options
from loadgen.cli.app import Failure, main
from servers.deployments import engine_names
from servers.deployments.catalog import available as catalog_names


@main.command()
@click.option(
    "--servers", required=True, help=f"Deployment: a catalog name ({', '.join(catalog_names())}) or a TOML file."
)
@click.option(
    "--engine",
    type=click.Choice(engine_names()),
    help="Override the deployment's engine (emulator: no GPU).",
)
@click.option("--variants", help="Comma-separated variants [default: all].")
@click.option("--workload", default="chat", show_default=True, help="One workload spec (loadgen workloads list).")
@options.sampling_options
@click.option("--data-dir", envvar="LOADGEN_DATA_DIR", help="Where catalog workloads find local data sets.")
@click.option("--slo", "slo_texts", multiple=True, help="An SLO as for loadgen check; repeat for more.")
@click.option("--goodput", help="Per-request objectives for a goodput SLO, e.g. 'ttft<=2s,tpot<=50ms'.")
@click.option(
    "--by",
    type=click.Choice(["concurrency", "rate"]),
    help="Search concurrency (closed loop) or arrival rate in requests/s (open loop, Poisson) "
    "[default: concurrency; with --trace the trace's speed; with --preset mlperf-server the rate].",
)
@click.option(
    "--trace",
    metavar="FORMAT:PATH",
    help="Search the highest speed (multiple of its own rate, its timing kept) at which each variant "
    "holds the SLOs replaying this production trace, its text from --workload (docs/check.md).",
)
@click.option("--trace-start", type=float, help="With --trace: start S seconds into the trace [0].")
@click.option("--trace-window", type=float, help="With --trace: replay S seconds of it [to its end].")
@click.option(
    "--preset",
    type=click.Choice(["mlperf-server"]),
    help="mlperf-server: MLPerf Inference's server scenario for an LLM: Poisson arrivals, 600 s a "
    "probe, p99 TTFT/TPOT limits of --mlperf-benchmark judged with its early stopping (docs/check.md).",
)
@click.option(
    "--mlperf-benchmark",
    type=click.Choice(sorted(LIMITS_MS)),
    help=f"With --preset mlperf-server: whose TTFT/TPOT limits apply [{DEFAULT_BENCHMARK}].",
)
@click.option(
    "--start",
    type=float,
    help="The first level tried [1; the preset: the lowest rate at which early stopping can pass].",
)
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
    help="Runs at each boundary level (the capacity, and the first level that failed) [3; the preset: 1].",
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
    """Find, per variant, the highest concurrency (or rate, or speed of a production trace) that
    meets the SLOs: doubling, bisection, repeats at the boundary; then recommend a variant and
    where SD should be off. --preset mlperf-server judges each rate as MLPerf's server scenario."""
    job = api.capacity_job(options.build(api.CapacityOptions, o), note=options.note)
    found, out = api.capacity(job), job.output
    lines = [f"Highest {found.by} within the SLOs:"]
    for r in found.results:
        lines.append(f"{r.variant:<16} {r.statement}")
        lines += [f"{'':<16} {line}" for line in found.details.get(r.variant, [])]
    lines += [""] + found.recommendation
    click.echo("\n".join(lines))
    click.echo(f"\nResults: {out / 'capacity.json'}, every probe in {out}/VARIANT/LEVEL-N/", err=True)
    if not found.results:
        raise Failure("no variant's server could be started", code=2)
