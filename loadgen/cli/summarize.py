"""`loadgen summarize DIR`: a run's summary.json and requests.parquet recomputed from its
journal, also when the run was killed before it could write them."""

from __future__ import annotations

from pathlib import Path

import click

from loadgen import api
from loadgen.cli import options
from loadgen.cli.app import main


@main.command()
@click.argument("directory", type=click.Path(path_type=Path))
def summarize(directory: Path) -> None:
    """Recompute a run's summary.json and requests.parquet from the requests it journaled as it
    went (records-*.arrows in its --output DIRECTORY, or a sweep cell's directory): for a run
    cut short (killed, out of memory, a lost session) the figures of every request journaled
    before the end, the summary saying where it was cut."""
    _, summary = api.summarize_dir(directory)
    api.write(directory, None, lambda: summary)
    cut = summary["journal"]
    if cut["cut"]:
        click.echo(
            f"note: the run was cut: {cut['records']} requests journaled, the last ending "
            f"{cut['last_request_end_s'] or 0:.1f} s in; {cut['unreadable_batches']} batches cut short skipped",
            err=True,
        )
    options.report(summary, directory, interrupted=False)
