"""`loadgen fit`: a cost profile of this machine from the user's own real sweeps."""

from __future__ import annotations

from pathlib import Path

import click

from loadgen import api
from loadgen.cli.app import main


@main.command()
@click.argument("sweeps", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--output", required=True, type=click.Path(dir_okay=False), help="The profile to write (a .toml file).")
@click.option(
    "--alone",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A sweep of the draft model served alone (its own deployment's baseline): the draft "
    "model's forward as it is, not guessed from the SD cells. Repeatable.",
)
@click.option("--description", help="The profile's description [default: the model, fitted by loadgen fit].")
@click.option("--no-acceptance", is_flag=True, help="Fit costs only (the sweeps kept no token ids).")
@click.option("--force", is_flag=True, help="Replace an existing --output.")
def fit(sweeps, output, alone, description, no_acceptance, force) -> None:
    """Fit a cost profile from real sweeps: a baseline and at least one SD variant at two or
    more levels (docs/emulator.md, "A profile of your own machine")."""
    job = api.FitJob(
        [Path(s) for s in sweeps],
        Path(output),
        alone=[Path(a) for a in alone],
        description=description,
        force=force,
        acceptance=not no_acceptance,
    )
    done = api.fit(job)
    click.echo("\n".join(done.record))
    click.echo(
        f"wrote {done.output}; use it: loadgen sweep --servers DEPLOYMENT --engine emulator --profile {done.output}"
    )
