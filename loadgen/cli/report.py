"""`loadgen report DIR` and `loadgen compare A B`: a sweep's results as answers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from loadgen.cli.app import Failure, main


@contextmanager
def _written(where: str) -> Iterator[None]:
    """Stored results read and something written from them (`report`, `export`): unreadable
    results, or a place that cannot be written, as one line each."""
    from loadgen.results.reading import ReportError

    try:
        yield
    except ReportError as e:
        raise Failure(str(e)) from None
    except OSError as e:
        raise Failure(f"cannot write {where}: {e.strerror or e}; choose another --output") from None


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the report [default: DIRECTORY/report].",
)
def report(directory: Path, output: Path | None) -> None:
    """Turn a sweep's results (its --output DIRECTORY) into report.html, report.md, PNG plots
    and CSV/parquet tables: speedup and break-even load, latency, acceptance, waste."""
    from loadgen.report.builder import build

    with _written(f"the report to {output or directory / 'report'}"):
        built = build(directory, output)
    for note in built.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(
        f"Report: {built.html} (self-contained), {built.markdown}, "
        f"{len(built.figures)} plots and {len(built.tables)} tables (CSV, parquet) in {built.out}"
    )


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["llmd"]),
    default="llmd",
    show_default=True,
    help="llmd: llm-d-benchmark's Benchmark Report v0.2.1, one JSON file per measured cell.",
)
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the files [default: DIRECTORY/llmd].",
)
def export(directory: Path, fmt: str, output: Path | None) -> None:
    """Write a run's or a sweep's results (its --output DIRECTORY) in another tool's schema:
    llm-d-benchmark's Benchmark Report (docs/report.md, "Export")."""
    from loadgen import api

    with _written(f"to {output or directory / 'llmd'}"):
        written = api.export_llmd(directory, output)
    where = written[0].parent if written else (output or directory / "llmd")
    click.echo(f"{len(written)} Benchmark Report{'s' if len(written) != 1 else ''} (v0.2.1, JSON) in {where}")


@main.command()
@click.argument("dir_a", type=click.Path(file_okay=False, path_type=Path))
@click.argument("dir_b", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the bootstrap.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), help="Also write the table as CSV.")
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the comparison as a self-contained HTML page (verdict, chart, table).",
)
def compare(dir_a: Path, dir_b: Path, seed: int, output: Path | None, html_out: Path | None) -> None:
    """The change from sweep DIR_A to sweep DIR_B in every cell both measured, with 95%
    intervals: from the repeats where both swept with --repeats (run-to-run variation
    included), else a bootstrap of the requests; '*' marks changes significant after Holm's
    correction."""
    from loadgen.report.compare import compare as run_compare
    from loadgen.report.compare import html_page, render
    from loadgen.results.reading import ReportError

    try:
        frame = run_compare(str(dir_a), str(dir_b), seed)
    except ReportError as e:
        raise Failure(str(e)) from None
    click.echo(render(frame))
    if output is not None:
        try:
            frame.to_csv(output, index=False)
        except OSError as e:
            raise Failure(f"cannot write {output}: {e.strerror or e}; choose another --output") from None
    if html_out is not None:
        try:
            html_out.write_text(html_page(frame, str(dir_a), str(dir_b)))
        except OSError as e:
            raise Failure(f"cannot write {html_out}: {e.strerror or e}; choose another --html") from None
