"""One measured run, end to end: the server (loadgen.run.target), the load from the execution
backend the job asks for (loadgen.backends), the figures converted to the emulated hardware's
time (loadgen.load.timescale), the request frame and the summary. The one pipeline every
measurement goes through: `loadgen run` and `loadgen check` are this plus their output, a sweep's
cell and a capacity probe are this with a cell's place (loadgen.sweep.cell: warm-up apart, the
emulator's time scale set first); `loadgen.api.run` is its door for Python."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from loadgen import backends
from loadgen import config as configs
from loadgen.backends.worker_processes import WorkerError
from loadgen.client.endpoint import EndpointError, api_base, metrics_url, probe
from loadgen.errors import LoadgenError
from loadgen.load import scrape, timescale
from loadgen.load.execute import RunResult, RunSpec, execute, session_for, stop_on_signals
from loadgen.load.workload import WorkloadRef
from loadgen.measures.frame import request_frame
from loadgen.measures.rows import Rows
from loadgen.measures.summary import summarize
from loadgen.outputs import journal
from loadgen.results import requests, store
from loadgen.run.target import Note, Target, serving
from workloads import Workload


@dataclass
class RunJob:
    """What a measured run needs beyond its `RunSpec` (whose api_base and model are filled in
    from the target): where the server is, how to send the load, how to judge it."""

    spec: RunSpec
    workload: Workload
    target: Target = field(default_factory=Target)
    model: str | None = None  # None: the server's first model
    keep_alive: bool | None = None  # None: as the server's engine wants (servers/engines: keep_alive)
    metrics_url: str | None = None  # None: the server's /metrics; "none": off
    workers: int = 1
    ray_address: str | None = None  # None: no Ray; "": RAY_ADDRESS, this host's, else a new one
    workload_ref: WorkloadRef | None = None  # how other processes open the same workload
    tokenizer: Any = None  # a tokenizers.Tokenizer
    tokenizer_path: str | None = None
    objectives: dict | None = None  # goodput objectives (loadgen.measures.objectives)
    lateness_threshold_ms: float = 5.0
    timing_threshold_ms: float = 4.0
    live: Any = None  # loadgen.outputs.live metrics, in-process only
    on_started: Callable[[], None] | None = None  # the server checked, the load about to go
    progress: Callable[[int, int], None] | None = None  # (done, failed) since the last call
    note: Note = lambda _: None  # what a person should know (stderr in the CLI)
    config: dict = field(default_factory=dict)  # more config keys (the command line, the host)
    handle_signals: bool = True  # SIGINT/SIGTERM stop the run early, keeping what finished
    steady_state: bool = False  # figures over the steady state only (loadgen.measures.summary)
    journal: str | None = None  # a results directory: requests journaled there as they end
    kind: str = "run"  # the config record's command: run, or sweep (a cell)
    warmup_apart: bool = False  # the spec's warm-up sent first, short, before the window opens
    set_time_scale: float | None = None  # ask the emulator to run at this scale before the load
    probe_required: bool = True  # False: a server that fails the model check is measured anyway
    on_start: Callable | None = None  # each request as it goes (without `live`)
    on_record: Callable | None = None  # each request's record as it ends (without `live`)


class NotMeasured(LoadgenError):
    """The server would not run at the time scale the job set (a cell's failure, not the sweep's)."""


class StoppedEarly(Exception):
    """SIGINT/SIGTERM during a separate warm-up: nothing was measured."""


WARMUP_TOKENS = 16  # a separate warm-up request's answer, at most: it warms the server and the connection,
# its length measures nothing (and at a time scale S costs S times as long)


@dataclass
class Measured:
    rows: Rows  # the request frame: in memory, or requests.parquet written from the journal
    result: RunResult
    job: RunJob
    tokenized: int = 0  # requests whose token ids came from the tokenizer

    @property
    def frame(self) -> pd.DataFrame:
        """The request frame in memory (read from requests.parquet where it was written there:
        for a run that fits in memory)."""
        if self.rows.frame is not None:
            return self.rows.frame
        assert self.rows.path is not None
        return store.read_requests(self.rows.path.parent)

    @property
    def interrupted(self) -> bool:
        return self.result.interrupted

    def summary(self) -> dict:
        job, result = self.job, self.result
        config = run_config(job, result)
        if job.kind == "run":
            config["token_ids_from_tokenizer"] = self.tokenized
        out = summarize(
            self.rows,
            result.loop_lag(),
            config=config,
            interrupted=result.interrupted,
            goodput=job.objectives,
            lateness_threshold_ms=job.lateness_threshold_ms,
            timing_threshold_ms=job.timing_threshold_ms,
            load_info=result.load_info,
            server_figures=scrape.figures(result.server_window),
            steady=job.steady_state,
        )
        seen = sorted(set(timescale.window_scales(result.server_window)) - {job.spec.time_scale})
        if seen:  # converted by one scale, served (partly) at another: the figures are not the hardware's
            out["time_scale_error"] = (
                f"the emulator ran at time scale {', '.join(f'{x:g}' for x in seen)} "
                f"during the run, whose figures were converted at {job.spec.time_scale:g}"
            )
        return out


def measure(job: RunJob) -> Measured:
    """Run the job: the target served, the load sent, every timestamp in the emulated
    hardware's time. Raises LoadgenError (one line) for what stops it before any load,
    NotMeasured when the server refuses the job's time scale, StoppedEarly when a signal ends a
    separate warm-up."""
    spec = job.spec
    spec.journal = None if job.journal is None else str(job.journal)
    if (job.workers > 1 or job.ray_address is not None) and job.live is not None:
        raise LoadgenError(
            "--metrics-port is not available with --workers or --ray (the requests "
            "are sent by other processes); drop one of them"
        )
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
            raise LoadgenError(
                "--"
                + str(e).replace("max_concurrency", "--max-concurrency").replace("the concurrency", "the --concurrency")
            ) from None
        cluster = _join_ray(job)
        try:
            result = asyncio.run(_run(job, cluster))
        finally:
            if job.live is not None:
                job.live.close()
            if cluster is not None:
                cluster.shutdown()
    tokenize = spec.token_ids and job.tokenizer is not None
    if result.journaled and not tokenize:  # the records are on disk, each written once when it ended:
        assert spec.journal is not None  # requests.parquet is written from them, in pieces
        journaled = requests.write_from_journal(spec.journal, job.tokenizer)
        if spec.journal_part:  # a continued cell: every part's loop-lag ticks judge its chunks
            result.loop_lag_at_ns, result.loop_lag_ns = journaled.lag_at_ns, journaled.lag_ns
            result.loop_lag_worker = journaled.lag_worker if len(result.loop_lag_worker) else []
        timescale.to_emulated(result, spec.time_scale)
        return Measured(Rows(path=Path(spec.journal) / store.REQUESTS), result, job)
    if result.journaled:  # token ids from the tokenizer: the records in memory (text included)
        assert spec.journal is not None
        result.records = journal.read(spec.journal).records
    timescale.to_emulated(result, spec.time_scale)
    tokenized = _tokenize_ids(job, result.records) if tokenize else 0
    return Measured(Rows(request_frame(result.records, job.tokenizer)), result, job, tokenized)


def _join_ray(job: RunJob):
    if job.ray_address is None:
        return None
    from loadgen.backends.raycluster import ClusterError, connect

    try:
        return connect(
            job.ray_address or None,
            "CPU",
            job.workers,
            what=f"--workers {job.workers} (a CPU each)",
            fix="add nodes, or give fewer --workers",
        )
    except ClusterError as e:
        raise LoadgenError(str(e)) from None


async def _run(job: RunJob, cluster) -> RunResult:
    stop = asyncio.Event()
    if not job.handle_signals:
        return await _load(job, cluster, stop)
    with stop_on_signals(asyncio.get_running_loop(), stop):
        return await _load(job, cluster, stop)


async def _load(job: RunJob, cluster, stop: asyncio.Event) -> RunResult:
    """Check the server and model (setting the spec's model, and keep-alive unless given), the
    time scale it runs at (set first where the job asks), the warm-up where it goes apart, then
    run the load on the job's backend."""
    spec = job.spec
    session = session_for(spec.load)
    try:
        try:  # the engine says whether it keeps connections, and what to ask for (Served)
            served = await probe(session, spec.api_base, spec.headers, job.model)
            spec.model = served.model
            spec.keep_alive = served.keep_alive if job.keep_alive is None else job.keep_alive
            if job.metrics_url is None:  # where its dialect keeps its metrics
                spec.metrics_url = metrics_url(spec.api_base, None, served.metrics_path)
            if served.request_fields:
                spec.extra_body = {**served.request_fields, **(spec.extra_body or {})}
        except EndpointError as e:
            if job.probe_required:
                raise LoadgenError(str(e)) from None
            spec.model = job.model or ""  # the requests will say what is wrong
        await _time_scale(job, session)
        on_start, on_record = job.on_start, job.on_record
        if job.live is not None:
            job.live.context(spec.model, "", job.workload.spec.split(",")[0], spec.load.level())
            on_start, on_record = job.live.started, job.live.finished
        if job.warmup_apart and spec.warmup:  # from this process, before the window opens (not in the
            # server's counters) and before the backend: worker processes have their own sessions
            warm = dataclasses.replace(
                spec,
                num_requests=spec.warmup,
                warmup=0,
                seed=spec.seed + 1,
                duration_s=None,
                metrics_url=None,
                journal=None,
            )
            short = (
                dataclasses.replace(r, max_tokens=min(r.max_tokens, WARMUP_TOKENS))
                for r in job.workload.requests(None, warm.seed)
            )
            await execute(warm, short, session=session, stop=stop, on_start=on_start, on_record=on_record)
            if stop.is_set():
                raise StoppedEarly
        backend = backends.choose(job.workers, job.workload_ref, cluster)
        if backend.local:
            backend = backends.InProcess(session)
        else:
            await session.close()  # the workers have their own
        if spec.journal is not None:
            write_config(job)
        if job.on_started is not None:
            job.on_started()
        measured = dataclasses.replace(spec, warmup=0) if job.warmup_apart else spec
        try:
            requests = job.workload.requests(None, spec.seed)
            return await backend.execute(
                measured, requests, stop=stop, on_progress=job.progress, on_start=on_start, on_record=on_record
            )
        except WorkerError as e:
            raise LoadgenError(str(e)) from None
    finally:
        await session.close()


async def _time_scale(job: RunJob, session) -> None:
    """The scale the server runs at, which converts every figure (1: a real server): set first
    where the job asks (an emulator, per sweep level), else read from its /metrics."""
    spec, given = job.spec, job.target.time_scale
    if job.set_time_scale is not None:
        try:
            await timescale.set_server_scale(session, spec.api_base, job.set_time_scale, spec.headers)
        except timescale.TimeScaleError as e:
            raise NotMeasured(str(e)) from None
    reported = await timescale.server_scale(session, spec.metrics_url)
    if job.set_time_scale is not None and (reported or 1.0) != job.set_time_scale:
        raise NotMeasured(
            f"the emulator reports time scale {reported or 1.0:g}, not the {job.set_time_scale:g} "
            "it was asked for (requests still in flight from before the cell?)"
        )
    spec.time_scale = reported or given or 1.0
    if reported and reported != 1 and given is None and job.set_time_scale is None:
        job.note(
            f"note: the server is an emulator running {reported:g}x slower than its model "
            "(its --time-scale); every figure is converted to its emulated time"
        )


def _tokenize_ids(job: RunJob, records) -> int:
    """Token ids from the tokenizer for the requests the server returned none for (the
    workload's requests regenerated: the same seed gives the same requests, in order)."""
    from loadgen.measures.tokens import fill_token_ids

    missing = [r for r in records if r.token_ids == [] and r.ok]
    if not missing:
        return 0
    last = max(r.index for r in missing)
    prompts = {
        i: req.text()
        for i, req in enumerate(itertools.islice(job.workload.requests(None, job.spec.seed), last + 1))
        if not req.sensitive
    }
    n = fill_token_ids(records, prompts, job.tokenizer)
    job.note(
        f"note: the server returned no token ids for {n} requests: tokenized their text with --tokenizer "
        "(prompts without the chat template)"
    )
    return n


def write_config(job: RunJob) -> None:
    """The run's configuration as known before the load goes, beside its journal: what
    `loadgen summarize` needs to summarize a run that never ended."""
    assert job.spec.journal is not None
    store.write_json(
        Path(job.spec.journal) / journal.CONFIG,
        {
            "config": run_config(job, None),
            "summarize": {
                "objectives": job.objectives,
                "lateness_threshold_ms": job.lateness_threshold_ms,
                "timing_threshold_ms": job.timing_threshold_ms,
                "steady_state": job.steady_state,
            },
        },
    )


def run_config(job: RunJob, result: RunResult | None) -> dict:
    """The run's config record (`result` None: before the run, without its clock)."""
    spec = job.spec
    return configs.run_config(
        job.kind,
        base_url=configs.public_url(spec.api_base),
        model=spec.model,
        endpoint=spec.endpoint,
        load=configs.described_load(spec.load, spec.think),
        num_requests=spec.num_requests,
        duration_s=spec.duration_s,
        warmup=spec.warmup,
        seed=spec.seed,
        workload=job.workload.describe(),
        clock=configs.clock(result.t0_ns, result.t0_unix) if result is not None else None,
        embedded_server=job.target.base_url is None,
        request_timeout_s=spec.request_timeout_s,
        continuous_usage_requested=spec.continuous_usage,
        tokenizer=job.tokenizer_path,
        extra_body=spec.extra_body,
        token_ids=spec.token_ids,
        speculative_config=job.config.get("speculative_config", job.target.speculative_config),
        metrics_url=configs.public_url(spec.metrics_url),
        api_key_provided=bool(spec.headers),
        keep_alive=spec.keep_alive,
        lateness_threshold_ms=job.lateness_threshold_ms,
        timing_threshold_ms=job.timing_threshold_ms,
        workers=job.workers,
        time_scale=spec.time_scale,
        time_scale_requested=job.target.time_scale if job.set_time_scale is None else job.set_time_scale,
        workers_on_ray=job.ray_address is not None,
        **{k: v for k, v in job.config.items() if k != "speculative_config"},
    )
