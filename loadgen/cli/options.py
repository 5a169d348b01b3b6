"""Options and steps `run`, `check` and `simulate` share: the load, the workload, the results."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from loadgen import api
from loadgen.cli.app import EXIT_INTERRUPTED, EXIT_NOTHING_SUCCEEDED, EXIT_USAGE
from loadgen.outputs import console


def load_options(f):
    for opt in reversed([
        click.option("--concurrency", type=int, help="Closed loop: N users, each sends when its last request ends."),
        click.option("--rate", type=float, help="Open loop: R requests per second."),
        click.option("--ramp", metavar="[users:|rate:]A:B:S",
                     help="Load rising linearly from A to B over S seconds, then held at B: users (closed "
                     "loop, the default) or requests per second (open loop), e.g. 1:32:60 or rate:1:20:60."),
        click.option("--arrival", type=click.Choice(["poisson", "gamma", "constant"]), default=None,
                     help="Open-loop gaps [default: poisson; gamma when --burstiness is given]."),
        click.option("--burstiness", type=float, default=None,
                     help="Gamma shape B: CV of gaps = 1/sqrt(B); 1 = Poisson, < 1 burstier."),
        click.option("--max-concurrency", type=int, help="Open loop: cap on requests in flight."),
        click.option("--trace", metavar="FORMAT:PATH", help="Replay a production trace's arrivals and lengths "
                     "(azure, mooncake, burstgpt, csv, jsonl; docs/workloads.md); its text from --workload."),
        click.option("--trace-speed", type=float, default=None,
                     help="Replay the trace X times faster (0.5: half speed); not the emulator's --time-scale [1]."),
        click.option("--trace-start", type=float, default=None,
                     help="Start the replay S seconds into the trace [0]."),
        click.option("--trace-window", type=float, help="Replay S seconds of the trace [default: to its end]."),
        click.option("--think-time", metavar="S|exp:S", help="Conversations (workloads with turns=session, "
                     "synthetic:session): seconds between a reply and the next turn, constant or exp:MEAN [0]."),
        click.option("--num-requests", "--max-requests", "num_requests", type=int, help="Requests to measure (after "
                     "warm-up; conversations, for a conversation workload) [default: 200 unless --duration is "
                     "given; a trace: its window's]."),
        click.option("--duration", type=float, help="Stop sending after S seconds."),
        click.option("--warmup", type=int, default=0, show_default=True,
                     help="Requests sent first and left out of the statistics."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seeds arrivals and workload."),
    ]):
        f = opt(f)
    return f


def workload_options(f):
    for opt in reversed([
        click.option("--workload", default="synthetic:random", show_default=True,
                     help="A catalog name (loadgen workloads list), FORMAT:PATH[,key=value...], "
                          "hf:DATASET_ID or synthetic:KIND[,key=value...]; docs/workloads.md."),
        click.option("--category", help="Only records of this category (formats with categories)."),
        click.option("--skip-bad", is_flag=True, help="Count and skip records that cannot be read."),
        click.option("--data-dir", envvar="LOADGEN_DATA_DIR", show_envvar=True,
                     help="Where catalog workloads find local data sets."),
        click.option("--input-len", type=int, default=None,
                     help="Synthetic shorthand: input_len (words ~ tokens) [random: 256; kinds: their data set's mean]."),
        click.option("--output-len", type=int, default=None,
                     help="Synthetic shorthand: output_len [random: 128, with ignore_eos; kinds: the model stops]."),
        click.option("--range-ratio", type=float, default=None,
                     help="Synthetic random shorthand: prompt lengths uniform within +-ratio [0.25]."),
    ]):
        f = opt(f)
    return f


def result_options(f):
    for opt in reversed([
        click.option("--goodput", "goodput_specs", multiple=True,
                     help="Per-request objectives, e.g. 'ttft<=500ms,tpot<=50ms'."),
        click.option("--output", "output_dir", type=click.Path(), default=None,
                     help="Results directory [default: results/<command>-YYYYmmdd-HHMMSS]."),
        click.option("--steady-state", is_flag=True, help="Figures over the steady state only: requests sent once "
                     "the load is up and finished before the drain (the summary says which; docs/metrics.md)."),
    ]):
        f = opt(f)
    return f


def note(message: str) -> None:
    """What a person should know, on stderr."""
    click.echo(message, err=True)


def prepare_output(o: dict, command: str) -> Path:
    return api.prepare(o["output_dir"] or time.strftime(f"results/{command}-%Y%m%d-%H%M%S"))


def report(summary: dict, out: Path, *, interrupted: bool, nothing_code: int = EXIT_NOTHING_SUCCEEDED,
           to_stderr: bool = False) -> dict:
    """Print a written run's summary and warnings; exit non-zero when interrupted or nothing
    succeeded."""
    click.echo(console.render(summary), err=to_stderr)
    for line in console.warnings(summary):
        click.echo(line, err=True)
    click.echo(f"\nResults: {out / api.SUMMARY}, {out / api.REQUESTS}", err=to_stderr)
    if summary.get("stopped_early"):
        click.echo(f"loadgen: error: {summary['stopped_early']}", err=True)
        sys.exit(EXIT_USAGE)
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if summary["completed"] == 0:
        click.echo("loadgen: error: no request succeeded; see the errors above", err=True)
        sys.exit(nothing_code)
    return summary
