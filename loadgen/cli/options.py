"""Options and steps `run`, `check` and `simulate` share: the load, the workload, the results."""

from __future__ import annotations

import sys
import time
from dataclasses import fields
from pathlib import Path

import click

from loadgen import api
from loadgen.cli.app import EXIT_INTERRUPTED, EXIT_NOTHING_SUCCEEDED, EXIT_USAGE
from loadgen.outputs import console
from loadgen.shapes.options import flags as shape_flags


def shape_options(f, sweep: bool = False):
    """The load shapes' options, as their family declares them (loadgen.shapes: each member's
    `OPTIONS`), so a new shape's module brings its flags to every command that takes a load
    (`sweep`: those a sweep takes beside its levels)."""
    for flag in reversed(shape_flags(sweep=sweep)):
        kind = click.Choice(flag.choices) if flag.choices else flag.type
        f = click.option(flag.flag, flag.name, type=kind, default=None, metavar=flag.metavar, help=flag.help)(f)
    return f


def sweep_shape_options(f):
    """The options of the shapes a sweep takes as its load, beside --concurrency / --rates."""
    return shape_options(f, sweep=True)


def build(model: type, params: dict):
    """The library's options model (loadgen.options) from click's parameters: each of its fields
    from the parameter of the same name, the shape's from the shape family's; the parameters
    that only the command line reads (--quiet, --output, ...) stay the CLI's."""
    values = {f.name: params[f.name] for f in fields(model) if f.name in params}
    if any(f.name == "shape" for f in fields(model)):
        values["shape"] = api.shape_options(
            **{
                flag.name: params[flag.name]
                for flag in shape_flags()
                if flag.name in params and (params[flag.name] is not None)
            }
        )
    return model(**values)


def load_options(f):
    for opt in reversed(
        [
            click.option(
                "--think-time",
                metavar="S|exp:S",
                help="Conversations (workloads with turns=session, "
                "synthetic:session): seconds between a reply and the next turn, constant or exp:MEAN [0].",
            ),
            click.option(
                "--num-requests",
                "--max-requests",
                "num_requests",
                type=int,
                help="Requests to measure (after "
                "warm-up; conversations, for a conversation workload) [default: 200 unless --duration is "
                "given; a trace: its window's].",
            ),
            click.option("--duration", type=float, help="Stop sending after S seconds."),
            click.option(
                "--warmup",
                type=int,
                default=0,
                show_default=True,
                help="Requests sent first and left out of the statistics.",
            ),
            click.option("--seed", type=int, default=0, show_default=True, help="Seeds arrivals and workload."),
        ]
    ):
        f = opt(f)
    return shape_options(f)


def sampling_options(f):
    """--temperature, --top-p, --top-k, --sampling-seed: what every request asks of the sampler
    (loadgen.options.SamplingOptions); run, check, simulate, sweep and capacity take them."""
    for opt in reversed(
        [
            click.option(
                "--temperature",
                type=float,
                default=None,
                help="Every request's temperature [the workload's temperature=, else 0: greedy, "
                "whatever the server's default].",
            ),
            click.option("--top-p", type=float, default=None, help="Every request's top_p [the server's default]."),
            click.option("--top-k", type=int, default=None, help="Every request's top_k [the server's default]."),
            click.option(
                "--sampling-seed",
                type=int,
                default=None,
                help="Every request's sampling seed (the body's `seed`; --seed orders the workload).",
            ),
        ]
    ):
        f = opt(f)
    return f


def workload_options(f):
    f = sampling_options(f)
    for opt in reversed(
        [
            click.option(
                "--workload",
                default="synthetic:random",
                show_default=True,
                help="A catalog name (loadgen workloads list), FORMAT:PATH[,key=value...], "
                "hf:DATASET_ID or synthetic:KIND[,key=value...]; docs/workloads.md.",
            ),
            click.option("--category", help="Only records of this category (formats with categories)."),
            click.option("--skip-bad", is_flag=True, help="Count and skip records that cannot be read."),
            click.option(
                "--data-dir",
                envvar="LOADGEN_DATA_DIR",
                show_envvar=True,
                help="Where catalog workloads find local data sets.",
            ),
            click.option(
                "--input-len",
                type=int,
                default=None,
                help="Synthetic shorthand: input_len (words ~ tokens) [random: 256; kinds: their data set's mean].",
            ),
            click.option(
                "--output-len",
                type=int,
                default=None,
                help="Synthetic shorthand: output_len [random: 128, with ignore_eos; kinds: the model stops].",
            ),
            click.option(
                "--range-ratio",
                type=float,
                default=None,
                help="Synthetic random shorthand: prompt lengths uniform within +-ratio [0.25].",
            ),
        ]
    ):
        f = opt(f)
    return f


def result_options(f):
    for opt in reversed(
        [
            click.option(
                "--goodput",
                "goodput_specs",
                multiple=True,
                help="Per-request objectives, e.g. 'ttft<=500ms,tpot<=50ms'.",
            ),
            click.option(
                "--output",
                "output_dir",
                type=click.Path(),
                default=None,
                help="Results directory [default: results/<command>-YYYYmmdd-HHMMSS].",
            ),
            click.option(
                "--steady-state",
                is_flag=True,
                help="Figures over the steady state only: requests sent once "
                "the load is up and finished before the drain (the summary says which; docs/metrics.md).",
            ),
        ]
    ):
        f = opt(f)
    return f


def ray_option(help: str):
    """--ray [ADDRESS]: a flag that may carry the cluster's address ("" when given bare)."""
    return click.option(
        "--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]", help=help
    )


def note(message: str) -> None:
    """What a person should know, on stderr."""
    click.echo(message, err=True)


def prepare_output(o: dict, command: str) -> Path:
    return api.prepare(o["output_dir"] or time.strftime(f"results/{command}-%Y%m%d-%H%M%S"))


def report(
    summary: dict, out: Path, *, interrupted: bool, nothing_code: int = EXIT_NOTHING_SUCCEEDED, to_stderr: bool = False
) -> dict:
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
