"""`loadgen check`: does this server hold this load within these SLOs? Exit 0 when every SLO
holds, 1 when any fails, 2 on a usage or infrastructure error (docs/check.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from loadgen import api
from loadgen.cli.app import EXIT_USAGE, Failure, main
from loadgen.cli.run import run_and_print, run_options
from servers.deployments import engine_names
from servers.deployments.catalog import available as catalog_names

EXIT_SLO_FAILED = 1


def report(suites: dict[str, list], junit: Path | None, as_json: bool) -> None:
    """Print the verdicts (loadgen.measures.slo.Verdict per SLO, per suite), write --junit, exit."""
    from loadgen.measures import slo

    if as_json:
        click.echo(slo.as_json(suites))
    else:
        for name, verdicts in suites.items():
            click.echo(slo.table(verdicts, f"\nSLO check: {name}"))
    if junit is not None:
        try:
            junit.write_text(slo.junit(suites))
        except OSError as e:
            raise Failure(f"cannot write --junit {junit}: {e.strerror or e}") from None
    failed = [v.slo for vs in suites.values() for v in vs if not v.passed]
    if failed:
        click.echo(f"loadgen check: FAILED: {', '.join(dict.fromkeys(failed))}", err=True)
        sys.exit(EXIT_SLO_FAILED)
    click.echo("loadgen check: every SLO holds", err=True)


@main.command()
@run_options
@click.option(
    "--servers",
    help=f"Start this deployment's --variant for the check (instead of --base-url): a catalog name "
    f"({', '.join(catalog_names())}) or a TOML file.",
)
@click.option("--variant", help="The variant of --servers to start.")
@click.option(
    "--engine",
    type=click.Choice(engine_names()),
    help="Override the deployment's engine (emulator: no GPU).",
)
@click.option(
    "--slo",
    "slo_texts",
    multiple=True,
    help="An SLO, e.g. 'ttft_p99<=2s', 'tpot_p50<=40ms', "
    "'error_rate<=0.1%', 'goodput>=95%' (goodput needs --goodput objectives). Repeat for more.",
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON instead of a table.")
@click.option(
    "--results",
    type=click.Path(path_type=Path),
    help="Judge recorded results (a run's or a sweep's directory) instead of running anything.",
)
def check(**o) -> None:
    """Run a load (as `loadgen run`) and judge it against SLOs: exit 0 when all hold, 1 when
    any fails, 2 on a usage or infrastructure error."""
    from loadgen.measures import slo

    targets = slo.parse_all(o["slo_texts"])
    if any(s.metric == "goodput" for s in targets) and not o["goodput_specs"] and not o["results"]:
        raise click.UsageError("--slo goodput needs per-request objectives: add --goodput 'ttft<=2s,tpot<=50ms'")
    if o["results"] is not None:
        summaries = api.summaries(o["results"])
    else:
        if o["base_url"] and o["servers"]:
            raise click.UsageError("give --base-url or --servers, not both")
        summary = run_and_print(o, nothing_code=EXIT_USAGE, to_stderr=o["as_json"])
        summaries = {"run": summary}
    report({name: slo.judge(s, targets) for name, s in summaries.items()}, o["junit"], o["as_json"])
