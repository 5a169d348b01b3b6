"""`loadgen workloads list | show`: what the catalog holds, and what a workload spec reads as."""
from __future__ import annotations

import click

from loadgen.cli.app import Failure, main
from loadgen.tokens import TokenizerError, load_tokenizer
from workloads import WorkloadError, catalog, open_workload
from workloads.stats import summary


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


def _fmt(d: dict | None) -> str:
    return "-" if d is None else f"{d['mean']:.0f} / {d['p50']:.0f} / {d['p99']:.0f}"


@workloads.command("list")
@click.option("--data-dir", envvar="LOADGEN_DATA_DIR", show_envvar=True, help="Where local data sets are.")
@click.option("--tokenizer", help="tokenizer.json (or its directory): lengths in tokens, not words.")
def list_(data_dir: str | None, tokenizer: str | None) -> None:
    """The catalog: each workload's source here, record count and lengths (no network)."""
    tok = _tokenizer(tokenizer)
    unit = "tokens" if tok else "words"
    click.echo(f"{'name':<16}{'records':>8}  {'prompt ' + unit + ' mean/p50/p99':<30}{'output':<12}source")
    for e in catalog.entries().values():
        usable = [s for s, why in catalog.candidates(e, catalog.data_dir(data_dir)) if why is None]
        local = [s for s in usable if not s.startswith("hf:")]
        spec = local[0] if local else e.standin
        try:
            w = open_workload(spec)
        except WorkloadError as err:
            click.echo(f"{e.name:<16}{'?':>8}  {'':<30}{e.output or '':<12}{spec}: {err}")
            continue
        reqs = w.records[:e.sample] if w.records is not None else list(w.requests(e.sample, 0))
        s = summary(reqs, tok)
        where = spec if local else (f"{usable[0]} (hub, not loaded here)" if usable else f"{e.standin} (offline stand-in)")
        click.echo(f"{e.name:<16}{s['requests']:>8}  {_fmt(s['prompt']):<30}{e.output or 'data':<12}{where}")
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
    reqs = w.records if w.records is not None else list(w.requests(num, 0))
    s = summary(reqs, tok)
    click.echo(f"workload   {w.spec}")
    click.echo(f"source     {w.source}" + (f"\nnote       {w.notice}" if w.notice else ""))
    click.echo(f"records    {len(w.records)}" if w.records is not None else f"generator  (described over {num} requests)")
    if w.skipped:
        click.echo(f"skipped    {w.skipped} bad records; first: {w.bad[0]}")
    cats = w.categories()
    if w.records is not None and len(cats) > 1:
        click.echo("categories " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    click.echo(f"lengths in {s['unit']}: mean / p50 / p99 / max")
    for key in ("prompt", "reference", "max_tokens"):
        d = s[key]
        if d is not None:
            click.echo(f"  {key:<10} {d['mean']:.0f} / {d['p50']:.0f} / {d['p99']:.0f} / {d['max']}")
    click.echo(f"output     {w.policy.mode}" + (f":{w.policy.tokens}" if w.policy.tokens else "")
               + "  (data: as the data set's loader sets it)" * (w.policy.mode == "data"))
    if w.sensitive:
        click.echo("examples   withheld: this data set's text must not be shown or stored")
        return
    for r in reqs[:2]:
        text = " ".join(r.text().split())
        click.echo(f"example    {r.id}: {text[:160]}{'...' if len(text) > 160 else ''}")
