"""`loadgen simulate`: the emulated engine under a load in virtual time, with the same records
and summary as a real run, in seconds."""
from __future__ import annotations

from pathlib import Path

import click

from loadgen import api
from loadgen.cli import options
from loadgen.cli.app import Failure, main
from loadgen.simulate import CLIENT_RTT_S, SimSpec


def _open_traces(path: str):
    """The --acceptance-traces file, opened before the simulation so a bad path costs nothing."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return open(path, "w")
    except OSError as e:
        raise Failure(f"cannot write --acceptance-traces {path!r}: {e.strerror or e}") from None


@main.command()
@click.option("--profile", help="Emulator cost profile (default: the one whose models include --model).")
@click.option("--model", default=None, help="Model name to record [default: the profile's first].")
@click.option("--speculative-config", "spec_json", help="As for vllm serve, e.g. "
              "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'. None: no speculative decoding.")
@click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions",
              show_default=True)
@click.option("--max-num-seqs", type=int, default=256, show_default=True)
@click.option("--max-num-batched-tokens", type=int, default=8192, show_default=True)
@click.option("--kv-cache-tokens", type=int, default=None, help="KV cache size [default: the profile's].")
@click.option("--client-rtt", "client_rtt_ms", type=click.FloatRange(min=0), default=CLIENT_RTT_S * 1e3,
              show_default=True, help="Milliseconds from a response's end to the next request reaching the "
              "engine (a closed-loop user's next one): as over loopback in a real run, where it misses the "
              "step that starts at once.")
@click.option("--acceptance-traces", "traces_path", type=click.Path(dir_okay=False),
              help="Also write every finished request's exact acceptance trace here (JSONL, for loadgen whatif).")
@options.load_options
@options.workload_options
@options.result_options
def simulate(**o) -> None:
    """Run a load against the emulated engine in virtual time (no server, no waiting)."""
    from servers.emulator import profile as profiles
    from servers.emulator.engine import EngineConfig
    from servers.emulator.spec import SpecError, parse

    load, num = options.load_shape(o)
    wl = options.workload(o)
    objectives = options.objectives(o)
    name = o["profile"] or (profiles.for_model(o["model"]) if o["model"] else None)
    if name is None:
        raise click.UsageError("give --profile (one of " + ", ".join(profiles.available()) + ") or a --model it serves")
    for key in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens"):
        if o[key] is not None and o[key] < 1:
            raise click.UsageError(f"--{key.replace('_', '-')} must be >= 1, got {o[key]}")
    try:
        profiles.load(name)
        spec = parse(o["spec_json"])
    except (profiles.ProfileError, SpecError) as e:
        raise Failure(str(e)) from None
    sim = SimSpec(name, spec, load, num_requests=num, duration_s=o["duration"], warmup=o["warmup"],
                  seed=o["seed"], endpoint=o["endpoint"], client_rtt_s=o["client_rtt_ms"] / 1e3,
                  engine=EngineConfig(max_num_seqs=o["max_num_seqs"],
                                      max_num_batched_tokens=o["max_num_batched_tokens"],
                                      kv_capacity_tokens=o["kv_cache_tokens"], seed=o["seed"]))
    out = options.prepare_output(o, "simulate")
    traces = _open_traces(o["traces_path"]) if o["traces_path"] else None
    done = api.simulate(api.SimJob(sim, wl, model=o["model"], spec_json=o["spec_json"], traces=traces,
                                   objectives=objectives,
                                   config={"host": options.host_config(), "argv": options.argv_without_secrets()}))
    click.echo(f"Simulated {len(done.frame)} requests on {name} ({spec.label if spec else 'no speculative decoding'}): "
               f"{done.result.makespan_s:.1f} s of serving in {done.wall_s:.1f} s", err=True)
    options.write_and_report(out, done.frame, done.summary, interrupted=False)
