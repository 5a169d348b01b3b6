"""`loadgen run`: send a workload to one server under one load and measure every request.
Options in, a `RunJob` to loadgen.api.run, its summary out."""

from __future__ import annotations

import click

from loadgen import api
from loadgen.cli import options
from loadgen.cli.app import EXIT_NOTHING_SUCCEEDED, main
from loadgen.outputs import console

# The options of `loadgen run` (and `loadgen check`), in the order --help lists them.
RUN_OPTIONS = [
    click.option(
        "--base-url",
        help="Server URL, http://host:port or http://host:port/v1. "
        "Without it, loadgen starts its embedded emulator (Llama-3.1-8B, EAGLE k=3).",
    ),
    click.option("--model", help="Model to request; default: the server's first in /v1/models."),
    click.option(
        "--speculative-config",
        metavar="JSON",
        help="What the server at --base-url runs, in vLLM's words (its --speculative-config): recorded, and "
        "its k bounds the accepted-draft rule (docs/metrics.md). loadgen knows it for a server it starts.",
    ),
    click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions", show_default=True),
    options.load_options,
    options.workload_options,
    click.option(
        "--api-key",
        envvar=["LOADGEN_API_KEY", "OPENAI_API_KEY"],
        show_envvar=True,
        help="Bearer token; never written to any output.",
    ),
    click.option(
        "--request-timeout",
        type=float,
        default=600.0,
        show_default=True,
        help="Seconds before a request is recorded as timed out.",
    ),
    click.option(
        "--max-error-rate",
        type=float,
        help="Stop early (exit code 2) when more than this share "
        "(0-1) of the last 20 finished requests failed: the server is down [default: never].",
    ),
    click.option(
        "--no-continuous-usage",
        is_flag=True,
        help="Do not ask for usage on every chunk (for servers that reject it).",
    ),
    click.option(
        "--tokenizer",
        help="tokenizer.json (or its directory): tokens per chunk when the server "
        "sends no per-chunk usage, and exact synthetic prompt lengths.",
    ),
    click.option("--extra-body", help="JSON object merged into every request body."),
    click.option(
        "--token-ids",
        is_flag=True,
        help="Ask for and keep every request's prompt and output "
        "token ids (vLLM's return_token_ids): for loadgen traces and whatif (docs/whatif.md).",
    ),
    click.option(
        "--keep-alive/--no-keep-alive",
        default=None,
        help="Reuse connections between requests, or open one per request (Connection: close) "
        "[default: reuse, except with servers that close after every stream: llama.cpp].",
    ),
    click.option(
        "--metrics-url",
        help="The server's Prometheus metrics, scraped before, during "
        "(every second) and after the measurement [default: the server's /metrics; 'none': off].",
    ),
    click.option(
        "--metrics-interval",
        type=click.FloatRange(min=0.05),
        metavar="S",
        help="Seconds between the samples of the server's /metrics through the measurement: "
        'the run\'s timeline (docs/metrics.md, "Over time") [default: 1].',
    ),
    click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        help="Serve the client's live metrics "
        "(requests, latency histograms) for Prometheus on 127.0.0.1:PORT/metrics (docs/dashboards.md).",
    ),
    click.option(
        "--time-scale",
        help="With the embedded emulator (no --base-url, or --servers on "
        "--engine emulator): run the emulated GPU S times slower than its model, for a machine "
        "that cannot keep its pace; every figure is reported in the emulated hardware's time. An "
        "emulator started elsewhere with --time-scale is read from its /metrics [default: 1].",
    ),
    click.option(
        "--workers",
        type=click.IntRange(1),
        default=1,
        show_default=True,
        help="Generate the load from N processes on this host, one event loop and "
        "connection pool each, the one schedule split between them (docs/metrics.md).",
    ),
    options.ray_option(
        "Run the --workers as Ray actors spread over a cluster's nodes (ADDRESS: the "
        "cluster's [default: RAY_ADDRESS, one on this host, else a new local one]); the server "
        "must be reachable from every node.",
    ),
    click.option(
        "--lateness-threshold-ms",
        type=float,
        default=5.0,
        show_default=True,
        help="Mark the run client_bound when send lateness or loop lag p99 exceeds this.",
    ),
    click.option(
        "--timing-threshold-ms",
        type=float,
        default=4.0,
        show_default=True,
        help="Mark the run client_bound when how far off a chunk's time gap can be (the compiled read "
        "path's own bound; on the pure-Python path the loop lag over chunk timestamps), or the first "
        "chunk's read delay, has a p99 over this.",
    ),
    options.result_options,
    click.option("--quiet", is_flag=True, help="No progress bar."),
]


def run_options(f):
    """The options of `loadgen run`, shared by `loadgen check`."""
    for deco in reversed(RUN_OPTIONS):
        f = deco(f)
    return f


@main.command()
@run_options
def run(**o) -> None:
    """Send a workload to one server under one load and measure every request."""
    run_and_print(o)


def run_and_print(o: dict, nothing_code: int = EXIT_NOTHING_SUCCEEDED, to_stderr: bool = False) -> dict:
    """`loadgen run` with options `o`: the run measured, its results written; its summary.
    Exits with `nothing_code` when no request succeeded."""
    job = api.run_job(
        options.build(api.RunOptions, o),
        note=options.note,
        config={"host": api.config.host(), "argv": api.config.argv_without_secrets()},
    )
    job.live = api.live_metrics(o["metrics_port"])
    out = options.prepare_output(o, "run")
    bar = console.ProgressBar(quiet=o["quiet"])
    job.on_started = lambda: bar.start(
        None if job.spec.num_requests is None else job.spec.num_requests + job.spec.warmup
    )
    job.progress = bar.update
    try:
        outcome = api.run(job, out)
    finally:
        bar.close()
    return options.report(
        outcome.summary, out, interrupted=outcome.interrupted, nothing_code=nothing_code, to_stderr=to_stderr
    )
