"""One measured run, end to end: the server (loadgen.run.target), the load from the execution
backend the job asks for (loadgen.backends), the figures converted to the emulated hardware's
time (loadgen.load.timescale), the request frame and the summary. `loadgen run` and `loadgen check`
are this plus their output; `loadgen.api.run` is its door for Python."""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from loadgen import backends
from loadgen import config as configs
from loadgen.backends.workers import WorkerError, WorkloadRef
from loadgen.client.endpoint import EndpointError, api_base, metrics_url, probe
from loadgen.errors import LoadgenError
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from loadgen.outputs import journal, store
from loadgen.load import scrape, timescale
from loadgen.load.execute import RunResult, RunSpec, session_for, stop_on_signals
from loadgen.run.target import Note, Target, serving


@dataclass
class RunJob:
    """What a measured run needs beyond its `RunSpec` (whose api_base and model are filled in
    from the target): where the server is, how to send the load, how to judge it."""

    spec: RunSpec
    workload: object                       # an opened workloads.Workload
    target: Target = field(default_factory=Target)
    model: str | None = None               # None: the server's first model
    keep_alive: bool | None = None         # None: as the server's kind wants (llama.cpp: off)
    metrics_url: str | None = None         # None: the server's /metrics; "none": off
    workers: int = 1
    ray_address: str | None = None         # None: no Ray; "": RAY_ADDRESS, this host's, else a new one
    workload_ref: WorkloadRef | None = None  # how other processes open the same workload
    tokenizer: object = None
    tokenizer_path: str | None = None
    objectives: dict | None = None         # goodput objectives (loadgen.measures.objectives)
    lateness_threshold_ms: float = 5.0
    timing_threshold_ms: float = 4.0
    live: object = None                    # loadgen.outputs.live metrics, in-process only
    on_started: Callable[[], None] | None = None  # the server checked, the load about to go
    progress: Callable[[int, int], None] | None = None  # (done, failed) since the last call
    note: Note = lambda _: None            # what a person should know (stderr in the CLI)
    config: dict = field(default_factory=dict)  # more config keys (the command line, the host)
    handle_signals: bool = True            # SIGINT/SIGTERM stop the run early, keeping what finished
    steady_state: bool = False             # figures over the steady state only (loadgen.measures.summary)
    journal: str | None = None             # a results directory: requests journaled there as they end


@dataclass
class Measured:
    frame: pd.DataFrame
    result: RunResult
    job: RunJob
    tokenized: int = 0  # requests whose token ids came from the tokenizer

    @property
    def interrupted(self) -> bool:
        return self.result.interrupted

    def summary(self) -> dict:
        job, result = self.job, self.result
        return summarize(self.frame, result.loop_lag(),
                         config={**run_config(job, result), "token_ids_from_tokenizer": self.tokenized},
                         interrupted=result.interrupted, goodput=job.objectives,
                         lateness_threshold_ms=job.lateness_threshold_ms,
                         timing_threshold_ms=job.timing_threshold_ms,
                         load_info=result.load_info, server_figures=scrape.figures(result.server_window),
                         steady=job.steady_state)


def measure(job: RunJob) -> Measured:
    """Run the job: the target served, the load sent, every timestamp in the emulated
    hardware's time. Raises LoadgenError (one line) for what stops it before any load."""
    spec = job.spec
    spec.journal = None if job.journal is None else str(job.journal)
    if (job.workers > 1 or job.ray_address is not None) and job.live is not None:
        raise LoadgenError("--metrics-port is not available with --workers or --ray (the requests "
                           "are sent by other processes); drop one of them")
    with serving(job.target, job.note) as url:
        try:
            spec.api_base = api_base(url)
        except EndpointError as e:
            raise LoadgenError(str(e)) from None
        spec.metrics_url = metrics_url(spec.api_base, job.metrics_url)
        try:
            if job.workers < 1:
                raise ValueError(f"workers must be >= 1, got {job.workers}")
            backends.choose(job.workers, job.workload_ref).check(spec)
        except ValueError as e:
            raise LoadgenError("--" + str(e).replace("max_concurrency", "--max-concurrency")
                               .replace("the concurrency", "the --concurrency")) from None
        cluster = _join_ray(job)
        try:
            result = asyncio.run(_run(job, cluster))
        finally:
            if job.live is not None:
                job.live.close()
            if cluster is not None:
                cluster.shutdown()
    if result.journaled:  # the records are on disk, each written once when it ended
        result.records = journal.read(spec.journal).records
    timescale.to_emulated(result, spec.time_scale)
    tokenized = _tokenize_ids(job, result.records) if spec.token_ids and job.tokenizer else 0
    return Measured(request_frame(result.records, job.tokenizer), result, job, tokenized)


def _join_ray(job: RunJob):
    if job.ray_address is None:
        return None
    from loadgen.backends.raycluster import ClusterError, connect
    try:
        return connect(job.ray_address or None, "CPU", job.workers, what=f"--workers {job.workers} (a CPU each)",
                       fix="add nodes, or give fewer --workers")
    except ClusterError as e:
        raise LoadgenError(str(e)) from None


async def _run(job: RunJob, cluster) -> RunResult:
    stop = asyncio.Event()
    if not job.handle_signals:
        return await _load(job, cluster, stop)
    with stop_on_signals(asyncio.get_running_loop(), stop):
        return await _load(job, cluster, stop)


async def _load(job: RunJob, cluster, stop: asyncio.Event) -> RunResult:
    """Check the server and model (setting the spec's model, and keep-alive unless given), then
    run the load on the job's backend."""
    spec = job.spec
    session = session_for(spec.load)
    try:
        try:
            served = await probe(session, spec.api_base, spec.headers, job.model)
            spec.model = served.model
            spec.keep_alive = served.keep_alive if job.keep_alive is None else job.keep_alive
        except EndpointError as e:
            raise LoadgenError(str(e)) from None
        given = job.target.time_scale
        reported = await timescale.server_scale(session, spec.metrics_url)
        spec.time_scale = reported or given or 1.0
        if reported and reported != 1 and given is None:
            job.note(f"note: the server is an emulator running {reported:g}x slower than its model "
                     "(its --time-scale); every figure is converted to its emulated time")
        on_start = on_record = None
        if job.live is not None:
            job.live.context(spec.model, "", job.workload.spec.split(",")[0], spec.load.level())
            on_start, on_record = job.live.started, job.live.finished
        backend = backends.choose(job.workers, job.workload_ref, cluster)
        if backend.local:
            backend = backends.InProcess(session)
        else:
            await session.close()  # the workers have their own
        if spec.journal is not None:
            write_config(job)
        if job.on_started is not None:
            job.on_started()
        try:
            requests = job.workload.requests(None, spec.seed)
            return await backend.execute(spec, requests, stop=stop, on_progress=job.progress,
                                         on_start=on_start, on_record=on_record)
        except WorkerError as e:
            raise LoadgenError(str(e)) from None
    finally:
        await session.close()


def _tokenize_ids(job: RunJob, records) -> int:
    """Token ids from the tokenizer for the requests the server returned none for (the
    workload's requests regenerated: the same seed gives the same requests, in order)."""
    from loadgen.measures.tokens import fill_token_ids
    missing = [r for r in records if r.token_ids == [] and r.ok]
    if not missing:
        return 0
    last = max(r.index for r in missing)
    prompts = {i: req.text() for i, req in enumerate(itertools.islice(job.workload.requests(None, job.spec.seed),
                                                                      last + 1))
               if not req.sensitive}
    n = fill_token_ids(records, prompts, job.tokenizer)
    job.note(f"note: the server returned no token ids for {n} requests: tokenized their text with --tokenizer "
             "(prompts without the chat template)")
    return n


def write_config(job: RunJob) -> None:
    """The run's configuration as known before the load goes, beside its journal: what
    `loadgen summarize` needs to summarize a run that never ended."""
    store.write_json(Path(job.spec.journal) / journal.CONFIG, {
        "config": run_config(job, None),
        "summarize": {"objectives": job.objectives, "lateness_threshold_ms": job.lateness_threshold_ms,
                      "timing_threshold_ms": job.timing_threshold_ms, "steady_state": job.steady_state}})


def run_config(job: RunJob, result: RunResult | None) -> dict:
    """The run's config record (`result` None: before the run, without its clock)."""
    spec = job.spec
    return configs.run_config(
        "run", base_url=configs.public_url(spec.api_base), model=spec.model, endpoint=spec.endpoint,
        load=configs.described_load(spec.load, spec.think), num_requests=spec.num_requests, duration_s=spec.duration_s,
        warmup=spec.warmup, seed=spec.seed, workload=job.workload.describe(),
        clock=configs.clock(result.t0_ns, result.t0_unix) if result is not None else None,
        embedded_server=job.target.base_url is None,
        request_timeout_s=spec.request_timeout_s, continuous_usage_requested=spec.continuous_usage,
        tokenizer=job.tokenizer_path, extra_body=spec.extra_body, token_ids=spec.token_ids,
        speculative_config=job.target.speculative_config,
        metrics_url=configs.public_url(spec.metrics_url),
        api_key_provided=bool(spec.headers), keep_alive=spec.keep_alive,
        lateness_threshold_ms=job.lateness_threshold_ms, timing_threshold_ms=job.timing_threshold_ms,
        workers=job.workers, time_scale=spec.time_scale,
        time_scale_requested=job.target.time_scale,
        workers_on_ray=job.ray_address is not None, **job.config)
