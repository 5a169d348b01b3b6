"""`loadgen workloads list | show`: what the catalog holds, and what a workload spec reads as."""

from __future__ import annotations

import click

from loadgen.cli.app import Failure, main
from loadgen.measures.tokens import TokenizerError, load_tokenizer
from workloads import WorkloadError, open_workload
from workloads.describe import catalog_lines, workload_lines


@main.group()
def workloads() -> None:
    """The workload catalog, and what any workload spec reads as."""


def _tokenizer(spec: str | None):
    if spec is None:
        return None
    try:
        return load_tokenizer(spec)
    except TokenizerError as e:
        raise Failure(str(e)) from None


@workloads.command("list")
@click.option("--data-dir", envvar="LOADGEN_DATA_DIR", show_envvar=True, help="Where local data sets are.")
@click.option("--tokenizer", help="tokenizer.json (or its directory): lengths in tokens, not words.")
def list_(data_dir: str | None, tokenizer: str | None) -> None:
    """The catalog: each workload's source here, record count and lengths (no network)."""
    click.echo("\n".join(catalog_lines(data_dir, _tokenizer(tokenizer))))
    click.echo("\nSet --data-dir (or LOADGEN_DATA_DIR) to use local copies; `loadgen workloads show NAME` for details.")


@workloads.command()
@click.argument("spec")
@click.option("--data-dir", envvar="LOADGEN_DATA_DIR", show_envvar=True, help="Where local data sets are.")
@click.option("--category", help="Only records of this category.")
@click.option("--skip-bad", is_flag=True, help="Count and skip records that cannot be read.")
@click.option("--tokenizer", help="tokenizer.json (or its directory): lengths in tokens, not words.")
@click.option("--num", type=int, default=500, show_default=True, help="Requests of a generator to describe.")
def show(spec: str, data_dir, category, skip_bad, tokenizer, num) -> None:
    """What a workload spec (catalog name, FORMAT:PATH, hf:ID, synthetic:KIND) reads as."""
    tok = _tokenizer(tokenizer)
    try:
        w = open_workload(spec, data_dir=data_dir, skip_bad=skip_bad, category=category)
    except WorkloadError as e:
        raise Failure(str(e)) from None
    click.echo("\n".join(workload_lines(w, num, tok)))
