"""`loadgen` command line. It validates input, wires the stages together and prints; it
computes nothing itself. Every bad input ends in one line naming the input and the fix."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import click

from loadgen import __version__, console, slo, store
from loadgen.endpoint import EndpointError, api_base, resolve_model
from loadgen.measure import request_frame
from loadgen.run import LoadShape, RunResult, RunSpec, execute, session_for
from loadgen.summary import summarize
from loadgen.tokens import TokenizerError, load_tokenizer
from workloads import random_lengths

WORKLOADS = ("synthetic",)
EXIT_USAGE = 2
EXIT_NOTHING_SUCCEEDED = 1
EXIT_INTERRUPTED = 130


class Failure(click.ClickException):
    """A one-line error; exit status 2 unless given."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = code


class _Group(click.Group):
    def main(self, args=None, prog_name=None, **kwargs):
        try:
            return super().main(args=args, prog_name=prog_name or "loadgen",
                                standalone_mode=False, **kwargs)
        except click.UsageError as e:
            click.echo(f"loadgen: error: {e.format_message()}", err=True)
            sys.exit(EXIT_USAGE)
        except click.ClickException as e:
            click.echo(f"loadgen: error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            sys.exit(EXIT_INTERRUPTED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadgen")
def main() -> None:
    """Load tester for LLM serving with speculative decoding."""


def _public_url(url: str) -> str:
    """The URL without any user:password part, for writing into results."""
    p = urlsplit(url)
    host = p.netloc.rsplit("@", 1)[-1]
    return urlunsplit((p.scheme, host, p.path, "", ""))


@main.command()
@click.option("--base-url", help="Server URL, http://host:port or http://host:port/v1. "
              "Without it, loadgen starts its embedded server.")
@click.option("--model", help="Model to request; default: the server's first in /v1/models.")
@click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions",
              show_default=True)
@click.option("--concurrency", type=int, help="Closed loop: N users, each sends when its last request ends.")
@click.option("--rate", type=float, help="Open loop: R requests per second.")
@click.option("--arrival", type=click.Choice(["poisson", "gamma", "constant"]), default=None,
              help="Open-loop gaps [default: poisson; gamma when --burstiness is given].")
@click.option("--burstiness", type=float, default=None,
              help="Gamma shape B: CV of gaps = 1/sqrt(B); 1 = Poisson, < 1 burstier.")
@click.option("--max-concurrency", type=int, help="Open loop: cap on requests in flight.")
@click.option("--num-requests", type=int, help="Requests to measure (after warm-up) [default: 200 "
              "unless --duration is given].")
@click.option("--duration", type=float, help="Stop sending after S seconds.")
@click.option("--warmup", type=int, default=0, show_default=True,
              help="Requests sent first and left out of the statistics.")
@click.option("--workload", type=click.Choice(WORKLOADS), default="synthetic", show_default=True)
@click.option("--input-len", type=int, default=256, show_default=True, help="Synthetic: mean prompt length (words ~ tokens).")
@click.option("--output-len", type=int, default=128, show_default=True, help="Synthetic: max_tokens, with ignore_eos.")
@click.option("--range-ratio", type=float, default=0.25, show_default=True,
              help="Synthetic: prompt lengths uniform within +-ratio of --input-len.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds arrivals and workload.")
@click.option("--api-key", envvar=["LOADGEN_API_KEY", "OPENAI_API_KEY"], show_envvar=True,
              help="Bearer token; never written to any output.")
@click.option("--request-timeout", type=float, default=600.0, show_default=True,
              help="Seconds before a request is recorded as timed out.")
@click.option("--no-continuous-usage", is_flag=True,
              help="Do not ask for usage on every chunk (for servers that reject it).")
@click.option("--tokenizer", help="tokenizer.json (or its directory) to count tokens per chunk "
              "when the server sends no per-chunk usage.")
@click.option("--extra-body", help="JSON object merged into every request body.")
@click.option("--goodput", "goodput_specs", multiple=True,
              help="Per-request objectives, e.g. 'ttft<=500ms,tpot<=50ms'.")
@click.option("--lateness-threshold-ms", type=float, default=5.0, show_default=True,
              help="Mark the run client_bound when send lateness or loop lag p99 exceeds this.")
@click.option("--output", "output_dir", type=click.Path(), default=None,
              help="Results directory [default: results/run-YYYYmmdd-HHMMSS].")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run(**o) -> None:
    """Send a workload to one server under one load and measure every request."""
    spec, workload, tokenizer, objectives = _validate(o)
    out_dir = o["output_dir"] or time.strftime("results/run-%Y%m%d-%H%M%S")
    try:
        out = store.prepare(out_dir)
    except store.OutputError as e:
        raise Failure(str(e)) from None
    with _server(o["base_url"]) as url:
        try:
            spec.api_base = api_base(url)
        except EndpointError as e:
            raise Failure(str(e)) from None
        result = asyncio.run(_run(spec, o["model"], workload, o["quiet"]))
    frame = request_frame(result.records, tokenizer)
    try:  # the requests first: whatever happens next, what was measured is kept
        store.write_requests(out, frame)
        config = _config(o, spec, embedded=o["base_url"] is None, result=result)
        summary = summarize(frame, (result.loop_lag_at_ns, result.loop_lag_ns), config=config,
                            interrupted=result.interrupted, goodput=objectives,
                            lateness_threshold_ms=o["lateness_threshold_ms"],
                            load_info=result.load_info)
        store.write_summary(out, summary)
    except OSError as e:
        raise Failure(f"cannot write results to {str(out)!r}: {e}", code=1) from None
    click.echo(console.render(summary))
    for line in console.warnings(summary):
        click.echo(line, err=True)
    click.echo(f"\nResults: {out / store.SUMMARY}, {out / store.REQUESTS}")
    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if summary["completed"] == 0:
        click.echo("loadgen: error: no request succeeded; see the errors above", err=True)
        sys.exit(EXIT_NOTHING_SUCCEEDED)


def _validate(o: dict):
    if (o["concurrency"] is None) == (o["rate"] is None):
        raise click.UsageError("give exactly one of --concurrency N (closed loop) and --rate R (open loop)")
    if o["concurrency"] is not None and (o["arrival"] or o["burstiness"] or o["max_concurrency"]):
        raise click.UsageError("--arrival, --burstiness and --max-concurrency apply to --rate only")
    arrival = o["arrival"] or ("gamma" if o["burstiness"] is not None else "poisson")
    if o["burstiness"] is not None and arrival != "gamma":
        raise click.UsageError(f"--burstiness applies to gamma arrivals, not --arrival {arrival}")
    num = o["num_requests"]
    if num is None and o["duration"] is None:
        num = 200
    headers = {"Authorization": f"Bearer {o['api_key']}"} if o["api_key"] else {}
    extra = None
    if o["extra_body"]:
        try:
            extra = json.loads(o["extra_body"])
        except ValueError as e:
            raise click.UsageError(f"--extra-body is not valid JSON ({e}); give an object like '{{\"top_k\": 1}}'")
        if not isinstance(extra, dict):
            raise click.UsageError("--extra-body must be a JSON object, like '{\"top_k\": 1}'")
    try:
        load = LoadShape(concurrency=o["concurrency"], rate=o["rate"], arrival=arrival,
                         burstiness=1.0 if o["burstiness"] is None else o["burstiness"], max_concurrency=o["max_concurrency"])
        spec = RunSpec(api_base="", model="", load=load, endpoint=o["endpoint"], num_requests=num,
                       duration_s=o["duration"], warmup=o["warmup"], seed=o["seed"],
                       request_timeout_s=o["request_timeout"],
                       continuous_usage=not o["no_continuous_usage"],
                       keep_text=o["tokenizer"] is not None, extra_body=extra, headers=headers)
        objectives = slo.parse(list(o["goodput_specs"])) or None
        if o["input_len"] < 1 or o["output_len"] < 1 or not 0 <= o["range_ratio"] < 1:
            raise ValueError("--input-len and --output-len must be >= 1 and --range-ratio in [0, 1)")
        workload = random_lengths(None, input_len=o["input_len"], output_len=o["output_len"],
                                  range_ratio=o["range_ratio"], seed=o["seed"])
    except ValueError as e:
        raise click.UsageError(_flagged(str(e))) from None
    tokenizer = None
    if o["tokenizer"]:
        try:
            tokenizer = load_tokenizer(o["tokenizer"])
        except TokenizerError as e:
            raise Failure(str(e)) from None
    return spec, workload, tokenizer, objectives


def _flagged(message: str) -> str:
    """Name the flag: 'rate must be > 0' -> '--rate must be > 0'."""
    for word in ("max_concurrency", "concurrency", "rate", "burstiness", "num_requests",
                 "duration", "warmup", "request_timeout"):
        if message.startswith(word + " "):
            return "--" + word.replace("_", "-") + message[len(word):]
    return message


@contextlib.contextmanager
def _server(base_url: str | None):
    if base_url is not None:
        yield base_url
        return
    from servers.embedded import ServerStartError, scripted_server
    try:
        with scripted_server() as srv:
            click.echo(f"No --base-url: measuring the embedded scripted server at {srv.url} "
                       "(simulated speculative decoding, one chunk per step)", err=True)
            yield srv.url
    except ServerStartError as e:
        raise Failure(str(e), code=1) from None


async def _run(spec: RunSpec, model: str | None, workload, quiet: bool) -> RunResult:
    """Check the server and model (setting `spec.model`), then run the load with a progress
    bar; SIGINT and SIGTERM stop it early and keep what finished."""
    session = session_for(spec.load)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    bar = None
    try:
        try:
            spec.model = await resolve_model(session, spec.api_base, spec.headers, model)
        except EndpointError as e:
            raise Failure(str(e)) from None
        from tqdm import tqdm
        tqdm.monitor_interval = 0  # no monitor thread in a process that measures latency
        total = None if spec.num_requests is None else spec.num_requests + spec.warmup
        bar = tqdm(total=total, unit="req", disable=quiet or None, leave=False,
                   mininterval=0.5, file=sys.stderr)
        failed = 0

        def progress(rec) -> None:
            nonlocal failed
            failed += not rec.ok
            bar.update(1)
            if failed:
                bar.set_postfix(failed=failed, refresh=False)

        return await execute(spec, workload, session=session, stop=stop, on_record=progress)
    finally:
        if bar is not None:
            bar.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await session.close()


def _config(o: dict, spec: RunSpec, *, embedded: bool, result: RunResult) -> dict:
    import aiohttp
    load = spec.load
    return {
        "loadgen_version": __version__,
        "base_url": _public_url(spec.api_base), "embedded_server": embedded,
        "model": spec.model, "endpoint": spec.endpoint,
        "load": {"mode": "closed" if load.closed else "open", "concurrency": load.concurrency,
                 "rate": load.rate, "arrival": None if load.closed else load.arrival,
                 "burstiness": load.burstiness if load.arrival == "gamma" and not load.closed else None,
                 "max_concurrency": load.max_concurrency},
        "num_requests": spec.num_requests, "duration_s": spec.duration_s, "warmup": spec.warmup,
        "seed": spec.seed,
        "workload": {"name": o["workload"], "input_len": o["input_len"],
                     "output_len": o["output_len"], "range_ratio": o["range_ratio"]},
        "request_timeout_s": spec.request_timeout_s,
        "continuous_usage_requested": spec.continuous_usage,
        "tokenizer": o["tokenizer"], "extra_body": spec.extra_body,
        "api_key_provided": bool(spec.headers),
        "lateness_threshold_ms": o["lateness_threshold_ms"],
        "clock": {"t0_ns": result.t0_ns, "t0_unix": result.t0_unix, "clock": "monotonic"},
        "host": {"name": platform.node(), "python": platform.python_version(),
                 "aiohttp": aiohttp.__version__, "cpus": os.cpu_count()},
        "argv": _argv_without_secrets(),
    }


def _argv_without_secrets() -> list[str]:
    out, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            out.append("***")
            skip = False
        elif arg == "--api-key":
            out.append(arg)
            skip = True
        elif arg.startswith("--api-key="):
            out.append("--api-key=***")
        else:
            out.append(arg)
    return out
