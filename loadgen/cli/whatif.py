"""`loadgen whatif TRACES`: what fixed k, an oracle, a combination of drafters and adaptive
speculation would give on the traffic the traces recorded, at each batch size."""

from __future__ import annotations

import json
from pathlib import Path

import click

from loadgen import api
from loadgen.cli.app import main
from loadgen.whatif import BATCHES, KS


def _positive_ints(text: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise click.UsageError(f"{flag} {text!r}: give whole numbers >= 1 separated by commas, like 1,8,64")
    return out


@main.command()
@click.argument("traces", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--profile",
    help="Cost profile of the model and hardware to evaluate on "
    "(servers/emulator/profiles) [default: the one whose models include --model].",
)
@click.option("--model", help="Pick the profile by the model it serves.")
@click.option(
    "--profile-anyway",
    is_flag=True,
    help="Use a profile fitted on another machine as it is (refused without); every output says so.",
)
@click.option(
    "--batch",
    "batches",
    default=",".join(map(str, BATCHES)),
    show_default=True,
    help="Batch sizes (closed-loop users) to evaluate at.",
)
@click.option(
    "--k", "ks", default=",".join(map(str, KS)), show_default=True, help="Fixed numbers of drafts to evaluate."
)
@click.option("--drafters", help="Drafters to consider, comma-separated [default: all the traces have].")
@click.option(
    "--oracle-depth",
    type=int,
    help="Most drafts a model drafter's oracle proposes [default: the largest --k; 0: no limit].",
)
@click.option(
    "--requests",
    "num_requests",
    type=int,
    help="Requests served per batch size [default: the "
    "traces, cycled to at least 4 x batch]; offline: requests sampled [300, or all there are].",
)
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write whatif.json here (loadgen report shows it when it sits in the results directory).",
)
@click.option(
    "--ngram-lookup",
    "lookup",
    default="3,7",
    show_default=True,
    help="prompt_lookup_min,max to "
    "derive the n-gram drafter's 'proposed' where a trace has none (vLLM's, as the study ran it).",
)
@click.option("--acc-as", default="eagle", show_default=True, help="The drafter a bare 'acc' (no method) is.")
@click.option(
    "--protocol",
    type=click.Choice(["closed", "offline"]),
    default="closed",
    show_default=True,
    help="closed: a closed loop of B users at each batch size; offline: the study's measurement, B copies "
    "of each sampled request (--requests, default 300) run together to the end (docs/whatif.md).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Offline: which requests are sampled.")
@click.option(
    "--schedule",
    is_flag=True,
    help="Print, per drafter, the k schedule by batch size as vLLM's "
    "--speculative-config and a deployment file (no SD, each fixed k, the schedule) for loadgen sweep; "
    "with --output, written as OUTPUT/schedule-METHOD.toml.",
)
def whatif(
    traces: Path,
    profile: str | None,
    model: str | None,
    profile_anyway: bool,
    batches: str,
    ks: str,
    drafters: str | None,
    oracle_depth: int | None,
    num_requests: int | None,
    output: Path | None,
    lookup: str,
    acc_as: str,
    protocol: str,
    seed: int,
    schedule: bool,
) -> None:
    """Replay acceptance traces (docs/whatif.md) in virtual time on a cost profile: per batch
    size, the throughput of no speculation, fixed k per drafter, each drafter's oracle, the
    per-position combination oracle and realisable policies, and the best of those."""
    from loadgen.whatif.results import render
    from servers.emulator import profile as profiles

    batch_sizes, k_values = _positive_ints(batches, "--batch"), _positive_ints(ks, "--k")
    if oracle_depth is not None and oracle_depth < 0:
        raise click.UsageError(f"--oracle-depth must be >= 0, got {oracle_depth}")
    if num_requests is not None and num_requests < 1:
        raise click.UsageError(f"--requests must be >= 1, got {num_requests}")
    name = profile or (profiles.for_model(model) if model else None)
    if name is None:
        raise click.UsageError(
            "give --profile (one of "
            + ", ".join(profiles.available())
            + ")"
            + (f"; no profile serves --model {model!r}" if model else " or a --model it serves")
        )
    done = api.whatif(
        api.WhatIfJob(
            traces,
            name,
            tuple(batch_sizes),
            tuple(k_values),
            [d.strip() for d in drafters.split(",") if d.strip()] if drafters else None,
            oracle_depth,
            num_requests,
            output,
            acc_as,
            _lookup(lookup, "--ngram-lookup"),
            protocol,
            seed,
            schedule,
            profile_anyway,
        ),
        progress=lambda line: click.echo(line, err=True),
    )
    for note in done.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(render(done.doc))
    click.echo(
        f"({done.policies} policies x {len(batch_sizes)} batch sizes in {done.wall_s:.1f} s of simulation)", err=True
    )
    for method, (text, path) in done.deployments.items():
        config = json.dumps(done.doc["schedules"][method]["speculative_config"], separators=(",", ":"))
        click.echo(f"\n{method}: --speculative-config '{config}'")
        click.echo(f"Wrote {path}: loadgen sweep --servers {path}" if path else f"# deployment file:\n{text}")
    if output is not None:
        click.echo(f"Wrote {output / 'whatif.json'}", err=True)


def _lookup(text: str, flag: str) -> tuple[int, int]:
    lo_hi = _positive_ints(text, flag)
    if len(lo_hi) != 2 or lo_hi[0] > lo_hi[1]:
        raise click.UsageError(f"{flag} {text!r}: give MIN,MAX with MIN <= MAX, like 3,7")
    return lo_hi[0], lo_hi[1]


def _drafter(text: str | None) -> tuple[str, int] | None:
    if text is None:
        return None
    from loadgen.whatif.fromrun import MODEL_DRAFTERS

    method, _, k = text.partition(":")
    if method not in MODEL_DRAFTERS or not k.isdigit() or int(k) < 1:
        raise click.UsageError(
            f"--drafter {text!r}: give METHOD:K, METHOD one of {', '.join(MODEL_DRAFTERS)} "
            "and K the run's num_speculative_tokens, like eagle:3"
        )
    return method, int(k)


@main.command()
@click.argument("results", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the traces [default: RESULTS/traces.jsonl].",
)
@click.option(
    "--drafter",
    help="The model drafter the server ran at fixed k, as METHOD:K (eagle:3), to "
    "estimate its acceptance from the run's steps [default: what the run's config says].",
)
@click.option(
    "--ngram",
    "lookup",
    default="5,5",
    show_default=True,
    help="prompt_lookup_min,prompt_lookup_max of the n-gram drafter to replay.",
)
def traces(results: Path, output: Path | None, drafter: str | None, lookup: str) -> None:
    """Acceptance traces from a run made with --token-ids: per request its token ids, the
    n-gram drafter's acceptance (exact, replayed) and the served model drafter's (estimated from
    the tokens each step emitted, censored at its k). Input for loadgen whatif."""
    path, built, notes = api.traces_from_run(results, output, _drafter(drafter), _lookup(lookup, "--ngram"))
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"Wrote {len(built)} traces to {path} (drafters: {', '.join(built[0].drafters) if built else 'none'})")
