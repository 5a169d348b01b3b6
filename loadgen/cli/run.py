"""`loadgen run`: send a workload to one server under one load and measure every request."""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from urllib.parse import urlsplit, urlunsplit

import click

from loadgen import __version__, timescale
from loadgen.cli import options
from loadgen.cli.app import EXIT_NOTHING_SUCCEEDED, Failure, main
from loadgen.endpoint import EndpointError, api_base, metrics_url, probe
from loadgen.measure import request_frame
from loadgen.run import RunResult, RunSpec, execute, session_for, stop_on_signals
from loadgen.summary import summarize
from loadgen.timescale import TimeScaleError, parse_scale
from loadgen.tokens import TokenizerError, load_tokenizer
from loadgen.workers import WorkerError, WorkloadRef, check_workers, execute_workers

# What `loadgen run` measures without --base-url: the emulated engine (servers/emulator) with the
# study's Llama-3.1-8B on H100 cost model and EAGLE, in real time.
EMBEDDED_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
EMBEDDED_SPEC = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'


def _public_url(url: str) -> str:
    """The URL without any user:password part, for writing into results."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc.rsplit("@", 1)[-1], p.path, "", ""))


def run_options(f):
    """The options of `loadgen run`, shared by `loadgen check`."""
    for deco in reversed([
        click.option("--base-url", help="Server URL, http://host:port or http://host:port/v1. "
                     "Without it, loadgen starts its embedded emulator (Llama-3.1-8B, EAGLE k=3)."),
        click.option("--model", help="Model to request; default: the server's first in /v1/models."),
        click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions",
                     show_default=True),
        options.load_options,
        options.workload_options,
        click.option("--api-key", envvar=["LOADGEN_API_KEY", "OPENAI_API_KEY"], show_envvar=True,
                     help="Bearer token; never written to any output."),
        click.option("--request-timeout", type=float, default=600.0, show_default=True,
                     help="Seconds before a request is recorded as timed out."),
        click.option("--no-continuous-usage", is_flag=True,
                     help="Do not ask for usage on every chunk (for servers that reject it)."),
        click.option("--tokenizer", help="tokenizer.json (or its directory): tokens per chunk when the server "
                     "sends no per-chunk usage, and exact synthetic prompt lengths."),
        click.option("--extra-body", help="JSON object merged into every request body."),
        click.option("--token-ids", is_flag=True, help="Ask for and keep every request's prompt and output "
                     "token ids (vLLM's return_token_ids): for loadgen traces and whatif (docs/whatif.md)."),
        click.option("--keep-alive/--no-keep-alive", default=None,
                     help="Reuse connections between requests, or open one per request (Connection: close) "
                     "[default: reuse, except with servers that close after every stream: llama.cpp]."),
        click.option("--metrics-url", help="The server's Prometheus metrics, scraped before, during "
                     "(every second) and after the measurement [default: the server's /metrics; 'none': off]."),
        click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve the client's live metrics "
                     "(requests, latency histograms) for Prometheus on 127.0.0.1:PORT/metrics (docs/dashboards.md)."),
        click.option("--time-scale", help="With the embedded emulator (no --base-url, or --servers on "
                     "--engine emulator): run the emulated GPU S times slower than its model, for a machine "
                     "that cannot keep its pace; every figure is reported in the emulated hardware's time. An "
                     "emulator started elsewhere with --time-scale is read from its /metrics [default: 1]."),
        click.option("--workers", type=click.IntRange(1), default=1, show_default=True,
                     help="Generate the load from N processes on this host, one event loop and "
                     "connection pool each, the one schedule split between them (docs/metrics.md)."),
        click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
                     help="Run the --workers as Ray actors spread over a cluster's nodes (ADDRESS: the "
                     "cluster's [default: RAY_ADDRESS, one on this host, else a new local one]); the server "
                     "must be reachable from every node."),
        click.option("--lateness-threshold-ms", type=float, default=5.0, show_default=True,
                     help="Mark the run client_bound when send lateness or loop lag p99 exceeds this."),
        click.option("--timing-threshold-ms", type=float, default=4.0, show_default=True,
                     help="Mark the run client_bound when the loop lag over chunk timestamps "
                     "(what the client's own delay may add to them) has a p99 over this."),
        options.result_options,
        click.option("--quiet", is_flag=True, help="No progress bar."),
    ]):
        f = deco(f)
    return f


@main.command()
@run_options
def run(**o) -> None:
    """Send a workload to one server under one load and measure every request."""
    measure(o)


def measure(o: dict, nothing_code: int = EXIT_NOTHING_SUCCEEDED, to_stderr: bool = False) -> dict:
    """`loadgen run` with options `o`: the run measured, its results written; its summary.
    Exits with `nothing_code` when no request succeeded."""
    load, num = options.load_shape(o)
    tokenizer = None
    if o["tokenizer"]:
        try:
            tokenizer = load_tokenizer(o["tokenizer"])
        except TokenizerError as e:
            raise Failure(str(e)) from None
    wl = options.workload(o, tokenizer)
    requests = wl.requests(None, o["seed"])
    objectives = options.objectives(o)
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
        spec = RunSpec(api_base="", model="", load=load, endpoint=o["endpoint"], num_requests=num,
                       duration_s=o["duration"], warmup=o["warmup"], seed=o["seed"],
                       request_timeout_s=o["request_timeout"],
                       continuous_usage=not o["no_continuous_usage"],
                       keep_text=o["tokenizer"] is not None, token_ids=o["token_ids"], extra_body=extra,
                       headers=headers)
    except ValueError as e:
        raise click.UsageError(options.flagged(str(e))) from None
    try:
        given_scale = parse_scale(o["time_scale"])
    except TimeScaleError as e:
        raise click.UsageError(str(e)) from None
    if given_scale is not None and o["base_url"] is not None:
        raise click.UsageError("--time-scale runs loadgen's own emulator slower; a server at --base-url keeps "
                               "its own time (an emulator started with --time-scale says so in its /metrics, "
                               "and loadgen reads it): drop --time-scale")
    out = options.prepare_output(o, "run")
    with _server(o["base_url"], o.get("servers"), o.get("variant"), o.get("engine"), given_scale) as url:
        try:
            spec.api_base = api_base(url)
        except EndpointError as e:
            raise Failure(str(e)) from None
        spec.metrics_url = metrics_url(spec.api_base, o["metrics_url"])
        if (o["workers"] > 1 or o["ray_address"] is not None) and o["metrics_port"] is not None:
            raise click.UsageError("--metrics-port is not available with --workers or --ray (the requests "
                                   "are sent by other processes); drop one of them")
        try:
            check_workers(o["workers"], spec)
        except ValueError as e:
            raise click.UsageError("--" + str(e).replace("max_concurrency", "--max-concurrency")
                                   .replace("the concurrency", "the --concurrency")) from None
        source = WorkloadRef(wl.spec, o["data_dir"], o["skip_bad"], o["category"], o["tokenizer"])
        cluster = _join_ray(o)
        live = options.live_metrics(o["metrics_port"])
        try:
            result = asyncio.run(_run(spec, o["model"], requests, o["quiet"], o["keep_alive"],
                                      live and (live, wl.spec.split(",")[0], _level(spec)),
                                      workers=(o["workers"], source, cluster), time_scale=given_scale))
        finally:
            if live is not None:
                live.close()
            if cluster is not None:
                cluster.shutdown()
    timescale.to_emulated(result, spec.time_scale)
    tokenized = _tokenize_ids(result.records, wl, o, tokenizer) if o["token_ids"] and tokenizer else 0
    frame = request_frame(result.records, tokenizer)

    def summary() -> dict:
        return summarize(frame, result.loop_lag(),
                         config={**_config(o, spec, result, wl), "token_ids_from_tokenizer": tokenized},
                         interrupted=result.interrupted,
                         goodput=objectives, lateness_threshold_ms=o["lateness_threshold_ms"],
                         timing_threshold_ms=o["timing_threshold_ms"],
                         load_info=result.load_info, server_window=result.server_window)

    return options.write_and_report(out, frame, summary, interrupted=result.interrupted, nothing_code=nothing_code,
                                    to_stderr=to_stderr)


def _tokenize_ids(records, wl, o: dict, tokenizer) -> int:
    """Token ids from the tokenizer for the requests the server returned none for (the
    workload's requests regenerated: the same seed gives the same requests, in order)."""
    from loadgen.tokens import fill_token_ids
    missing = [r for r in records if r.token_ids == [] and r.ok]
    if not missing:
        return 0
    last = max(r.index for r in missing)
    prompts = {i: req.text() for i, req in enumerate(itertools.islice(wl.requests(None, o["seed"]), last + 1))
               if not req.sensitive}
    n = fill_token_ids(records, prompts, tokenizer)
    click.echo(f"note: the server returned no token ids for {n} requests: tokenized their text with --tokenizer "
               "(prompts without the chat template)", err=True)
    return n


@contextlib.contextmanager
def _server(base_url: str | None, servers: str | None = None, variant: str | None = None,
            engine: str | None = None, time_scale: float | None = None):
    if base_url is not None:
        yield base_url
        return
    if servers is not None:  # a catalog variant, started here (loadgen check --servers)
        yield from _variant_server(servers, variant, engine, time_scale)
        return
    from servers.embedded import ServerStartError, emulator_server
    scale = [] if time_scale is None else ["--time-scale", str(time_scale)]
    try:
        with emulator_server(EMBEDDED_MODEL, "--speculative-config", EMBEDDED_SPEC, *scale) as srv:
            pace = "in real time" if not time_scale or time_scale == 1 else f"{time_scale:g}x slower than real time"
            click.echo(f"No --base-url: measuring the embedded emulator at {srv.url} "
                       f"({EMBEDDED_MODEL} on one emulated H100, EAGLE k=3, {pace})", err=True)
            yield srv.url
    except ServerStartError as e:
        raise Failure(str(e), code=1) from None


def _join_ray(o: dict):
    """With --ray: the joined cluster (Ray's module, initialised), else None."""
    if o["ray_address"] is None:
        return None
    from loadgen.raycluster import ClusterError, connect
    try:
        return connect(o["ray_address"] or None, "CPU", o["workers"], what=f"--workers {o['workers']} (a CPU each)",
                       fix="add nodes, or give fewer --workers")
    except ClusterError as e:
        raise Failure(str(e)) from None


def _level(spec: RunSpec) -> str:
    return spec.load.level()


async def _run(spec: RunSpec, model: str | None, requests, quiet: bool, keep_alive: bool | None,
               live=None, workers: tuple = (1, None, None), time_scale: float | None = None) -> RunResult:
    """Check the server and model (setting `spec.model`, and `spec.keep_alive` unless given),
    then run the load (from `workers[0]` processes, or Ray actors on the joined cluster
    `workers[2]`, which open the workload `workers[1]`) with a progress bar; SIGINT and SIGTERM
    stop it early and keep what finished."""
    stop = asyncio.Event()
    with stop_on_signals(asyncio.get_running_loop(), stop):
        return await _run_load(spec, model, requests, quiet, keep_alive, live, workers, stop, time_scale)


async def _run_load(spec: RunSpec, model: str | None, requests, quiet: bool, keep_alive: bool | None,
                    live, workers: tuple, stop: asyncio.Event, time_scale: float | None) -> RunResult:
    session = session_for(spec.load)
    bar = None
    try:
        try:
            served = await probe(session, spec.api_base, spec.headers, model)
            spec.model = served.model
            spec.keep_alive = served.keep_alive if keep_alive is None else keep_alive
        except EndpointError as e:
            raise Failure(str(e)) from None
        reported = await timescale.server_scale(session, spec.metrics_url)
        spec.time_scale = reported or time_scale or 1.0
        if reported and reported != 1 and time_scale is None:
            click.echo(f"note: the server is an emulator running {reported:g}x slower than its model "
                       "(its --time-scale); every figure is converted to its emulated time", err=True)
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

        on_start = None
        if live is not None:
            metrics, workload, level = live
            metrics.context(spec.model, "", workload, level)
            on_start = metrics.started

            def both(rec, shown=progress) -> None:
                metrics.finished(rec)
                shown(rec)
            progress = both
        if workers[0] > 1 or workers[2] is not None:
            def counts(done: int, failed_now: int) -> None:
                nonlocal failed
                failed += failed_now
                bar.update(done)
                if failed:
                    bar.set_postfix(failed=failed, refresh=False)
            await session.close()  # the workers have their own
            try:
                if workers[2] is not None:
                    from loadgen.fanout import execute_on_ray
                    return await execute_on_ray(workers[2], spec, workers[1], workers[0], stop=stop,
                                                on_progress=counts)
                return await execute_workers(spec, workers[1], workers[0], stop=stop, on_progress=counts)
            except WorkerError as e:
                raise Failure(str(e)) from None
        return await execute(spec, requests, session=session, stop=stop, on_record=progress, on_start=on_start)
    finally:
        if bar is not None:
            bar.close()
        await session.close()


def _config(o: dict, spec: RunSpec, result: RunResult, wl) -> dict:
    return {
        "command": "run", "loadgen_version": __version__,
        "base_url": _public_url(spec.api_base), "embedded_server": o["base_url"] is None,
        "model": spec.model, "endpoint": spec.endpoint, "load": spec.load.describe(),
        "num_requests": spec.num_requests, "duration_s": spec.duration_s, "warmup": spec.warmup,
        "seed": spec.seed, "workload": wl.describe(),
        "request_timeout_s": spec.request_timeout_s,
        "continuous_usage_requested": spec.continuous_usage,
        "tokenizer": o["tokenizer"], "extra_body": spec.extra_body, "token_ids": spec.token_ids,
        "speculative_config": EMBEDDED_SPEC if o["base_url"] is None and not o.get("servers") else None,
        "metrics_url": spec.metrics_url and _public_url(spec.metrics_url),
        "api_key_provided": bool(spec.headers), "keep_alive": spec.keep_alive,
        "lateness_threshold_ms": o["lateness_threshold_ms"],
        "timing_threshold_ms": o["timing_threshold_ms"], "workers": o["workers"],
        "time_scale": spec.time_scale, "time_scale_requested": o["time_scale"] and float(o["time_scale"]),
        "workers_on_ray": o["ray_address"] is not None,
        "clock": {"t0_ns": result.t0_ns, "t0_unix": result.t0_unix, "clock": "monotonic"},
        "host": options.host_config(), "argv": options.argv_without_secrets(),
    }


def _variant_server(servers: str, variant: str | None, engine: str | None, time_scale: float | None = None):
    import tempfile
    from pathlib import Path

    from servers.deployments import DeploymentError, load, render
    from servers.launcher import LaunchError, Server, free_port
    try:
        dep = load(servers).with_engine(engine)
        if variant is None:
            raise DeploymentError(f"--servers {servers} needs --variant, one of {', '.join(dep.variants)}")
        launch = render(dep, variant, port=8000 if dep.engine == "vllm" else free_port())
    except DeploymentError as e:
        raise Failure(str(e)) from None
    if time_scale is not None:
        launch = with_time_scale(launch, time_scale)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with Server(launch, Path(tmp) / "server.log") as srv:
                click.echo(f"started {variant}: {launch.shell()}", err=True)
                yield srv.launch.url
        except LaunchError as e:
            raise Failure(str(e)) from None


def with_time_scale(launch, time_scale: float):
    """A rendered emulator launch that runs at `time_scale` (a later --time-scale wins over one in
    the deployment's emulator_args); Failure for any other engine."""
    import dataclasses
    if launch.engine != "emulator":
        raise Failure(f"--time-scale runs the emulated GPU slower; {launch.variant} runs on {launch.engine}, "
                      "whose hardware keeps its own time: drop --time-scale (or add --engine emulator)")
    return dataclasses.replace(launch, argv=(*launch.argv, "--time-scale", str(time_scale)))
