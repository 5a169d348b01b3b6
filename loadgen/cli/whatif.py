"""`loadgen whatif TRACES`: what fixed k, an oracle, a combination of drafters and adaptive
speculation would give on the traffic the traces recorded, at each batch size."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from loadgen.cli.app import Failure, main

DEFAULT_BATCHES = "1,8,16,32,64,128"


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
@click.option("--profile", help="Cost profile of the model and hardware to evaluate on "
              "(servers/emulator/profiles) [default: the one whose models include --model].")
@click.option("--model", help="Pick the profile by the model it serves.")
@click.option("--batch", "batches", default=DEFAULT_BATCHES, show_default=True,
              help="Batch sizes (closed-loop users) to evaluate at.")
@click.option("--k", "ks", default="1,3,5", show_default=True, help="Fixed numbers of drafts to evaluate.")
@click.option("--drafters", help="Drafters to consider, comma-separated [default: all the traces have].")
@click.option("--oracle-depth", type=int,
              help="Most drafts a model drafter's oracle proposes [default: the largest --k; 0: no limit].")
@click.option("--requests", "num_requests", type=int,
              help="Requests served per batch size [default: the traces, cycled to at least 4 x batch].")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path),
              help="Also write whatif.json here (loadgen report shows it when it sits in the results directory).")
def whatif(traces: Path, profile: str | None, model: str | None, batches: str, ks: str, drafters: str | None,
           oracle_depth: int | None, num_requests: int | None, output: Path | None) -> None:
    """Replay acceptance traces (docs/whatif.md) in virtual time on a cost profile: per batch
    size, the throughput of no speculation, fixed k per drafter, each drafter's oracle, the
    per-position combination oracle and realisable policies, and the best of those."""
    from loadgen.whatif import evaluate as ev
    from loadgen.whatif.report import render, to_json
    from loadgen.whatif.traces import TraceError, read
    from servers.emulator import profile as profiles

    batch_sizes = _positive_ints(batches, "--batch")
    k_values = _positive_ints(ks, "--k")
    if oracle_depth is not None and oracle_depth < 0:
        raise click.UsageError(f"--oracle-depth must be >= 0, got {oracle_depth}")
    depth = max(k_values) if oracle_depth is None else (oracle_depth or None)
    if num_requests is not None and num_requests < 1:
        raise click.UsageError(f"--requests must be >= 1, got {num_requests}")
    name = profile or (profiles.for_model(model) if model else None)
    if name is None:
        raise click.UsageError("give --profile (one of " + ", ".join(profiles.available()) + ")"
                               + (f"; no profile serves --model {model!r}" if model else " or a --model it serves"))
    try:
        prof = profiles.load(name)
        loaded = read(traces)
        methods = ev.drafters_of(loaded, prof, [d.strip() for d in drafters.split(",") if d.strip()] if drafters else None)
        chosen = ev.candidates(methods, tuple(k_values), k_max=max(k_values), oracle_depth=depth or 0)
        wall = time.monotonic()
        outcomes = ev.evaluate(loaded, name, batch_sizes, chosen, requests=num_requests)
    except (profiles.ProfileError, TraceError, ev.WhatIfError) as e:
        raise Failure(str(e)) from None
    wall = time.monotonic() - wall
    doc = to_json(loaded, methods, name, outcomes, source=str(traces), ks=k_values,
                  oracle_depth=depth)
    click.echo(render(doc))
    click.echo(f"({len(chosen)} policies x {len(batch_sizes)} batch sizes in {wall:.1f} s of simulation)", err=True)
    if output is not None:
        try:
            output.mkdir(parents=True, exist_ok=True)
            (output / "whatif.json").write_text(json.dumps(doc, indent=1))
        except OSError as e:
            raise Failure(f"cannot write {output / 'whatif.json'}: {e.strerror or e}; choose another --output") from None
        click.echo(f"Wrote {output / 'whatif.json'}", err=True)

