"""`loadgen simulate`: the emulated engine under a load in virtual time, with the same records
and summary as a real run, in seconds."""

from __future__ import annotations

import click

from loadgen import api
from loadgen.cli import options
from loadgen.cli.app import main
from loadgen.simulate import CLIENT_RTT_S


@main.command()
@click.option("--profile", help="Emulator cost profile (default: the one whose models include --model).")
@click.option(
    "--profile-anyway",
    is_flag=True,
    help="Use a profile fitted on another machine as it is (refused without); every output says so.",
)
@click.option("--model", default=None, help="Model name to record [default: the profile's first].")
@click.option(
    "--speculative-config",
    "spec_json",
    help='As for vllm serve, e.g. \'{"method": "ngram", "num_speculative_tokens": 3}\'. None: no speculative decoding.',
)
@click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions", show_default=True)
@click.option("--max-num-seqs", type=int, default=256, show_default=True)
@click.option("--max-num-batched-tokens", type=int, default=8192, show_default=True)
@click.option(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    "prefix_caching",
    default=True,
    show_default=True,
    help="Reuse the KV of cached prompt blocks, as vLLM does by default.",
)
@click.option("--kv-cache-tokens", type=int, default=None, help="KV cache size [default: the profile's].")
@click.option(
    "--client-rtt",
    "client_rtt_ms",
    type=click.FloatRange(min=0),
    default=CLIENT_RTT_S * 1e3,
    show_default=True,
    help="Milliseconds from a response's end to the next request reaching the "
    "engine (a closed-loop user's next one): as over loopback in a real run, where it misses the "
    "step that starts at once.",
)
@click.option(
    "--acceptance-traces",
    "traces_path",
    type=click.Path(dir_okay=False),
    help="Also write every finished request's exact acceptance trace here (JSONL, for loadgen whatif).",
)
@click.option(
    "--reasoning-parser",
    help="Serve a thinking model, as vllm serve's flag: on the chat endpoint it thinks before it "
    "answers (docs/reasoning.md); one of vLLM 0.32's parser names, e.g. qwen3.",
)
@click.option(
    "--tool-call-parser",
    help="The model calls a request's tools when it sees fit, as vllm serve's --enable-auto-tool-choice "
    "--tool-call-parser NAME (docs/reasoning.md).",
)
@click.option(
    "--extra-body",
    help="JSON merged into every request, as for loadgen run; the engine reads a reasoning "
    "model's thinking_token_budget, chat_template_kwargs.enable_thinking and reasoning_effort.",
)
@options.load_options
@options.workload_options
@options.result_options
def simulate(**o) -> None:
    """Run a load against the emulated engine in virtual time (no server, no waiting)."""
    job = api.sim_job(
        options.build(api.SimOptions, o),
        note=options.note,
        config={"host": api.config.host(), "argv": api.config.argv_without_secrets()},
    )
    out = options.prepare_output(o, "simulate")
    done = api.simulate(job)
    for message in done.result.engine.notes:  # what the configuration does not do, as the server says it
        options.note(f"note: {message}")
    spec = job.sim.spec
    click.echo(
        f"Simulated {len(done.frame)} requests on {job.sim.profile} "
        f"({spec.label if spec else 'no speculative decoding'}): "
        f"{done.result.makespan_s:.1f} s of serving in {done.wall_s:.1f} s",
        err=True,
    )
    summary = api.write(out, done.frame, done.summary)
    options.report(summary, out, interrupted=False)
