"""One measured run: a workload sent to one server under one load shape.

Wires the pieces (feed -> executor -> client -> records) and returns the raw records plus
the client's own lag samples. Nothing here computes a figure; `loadgen.measures.frame` and
`loadgen.measures.summary` do.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from loadgen.client.bodies import build_body, stream_options
from loadgen.client.record import RequestRecord
from loadgen.errors import LoadgenError
from loadgen.executors import Feed, Item, Share, closed_loop, open_loop
from loadgen.executors.conversation import Think, conversing
from loadgen.load.looplag import LoopLagMonitor
from loadgen.load.scrape import RunWindow, Window
from loadgen.outputs.journal import Journal, Relay, end_of, path_for
from loadgen.shapes import LoadShape, Shape  # noqa: F401 - LoadShape: the steady shapes by their numbers
from workloads import Request

if TYPE_CHECKING:  # the session comes from loadgen.client (aiohttp, loaded when a run starts)
    import aiohttp


@contextlib.contextmanager
def stop_on_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event):
    """SIGINT and SIGTERM set `stop` inside the block; after it the handlers from before are
    back. (asyncio's remove_signal_handler leaves SIGTERM at its default, which kills the
    process: a sweep between two cells, or a run writing its results, would die at SIGTERM
    instead of stopping and keeping what finished.)"""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            if handler is not None:
                signal.signal(sig, handler)


@dataclass(slots=True)
class RunSpec:
    api_base: str
    model: str
    load: Shape
    endpoint: str = "completions"
    num_requests: int | None = 200
    duration_s: float | None = None
    warmup: int = 0
    seed: int = 0
    request_timeout_s: float = 600.0
    continuous_usage: bool = True
    keep_text: bool = False
    token_ids: bool = False  # ask for and keep each request's token ids (return_token_ids)
    extra_body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)  # secrets live here: never serialise
    keep_alive: bool = True  # reuse connections; False: `Connection: close`, one per request
    metrics_url: str | None = None  # the server's Prometheus /metrics, scraped around the run
    scrape_interval_s: float = 1.0
    # real seconds per emulated second of a dilated emulator (loadgen.load.timescale): open-loop gaps,
    # the duration and the timeout are emulated seconds, stretched by it in real time
    time_scale: float = 1.0
    think: Think = field(default_factory=Think)  # between a conversation's turns (emulated seconds)
    # a results directory: finished requests are appended to its journal as they end and leave
    # memory (loadgen.outputs.journal); None: kept in memory until the run ends
    journal: str | None = None
    journal_part: int = 0  # which part of the run this is (a sweep cell continued by --resume: 1, 2, ...)
    # request numbers already measured (a continued cell's journal holds them): not sent again
    skip: frozenset[int] = frozenset()
    # stop sending when more than this share of the last ERROR_WINDOW finished requests failed
    # (the server is down: no point spinning through the schedule); None: never
    max_error_rate: float | None = None

    def __post_init__(self) -> None:
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("bound the run by num_requests and/or duration_s")
        if self.num_requests is not None and self.num_requests < 1:
            raise ValueError(f"num_requests must be >= 1, got {self.num_requests}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError(f"duration must be > 0, got {self.duration_s}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout must be > 0, got {self.request_timeout_s}")
        if self.max_error_rate is not None and not 0 <= self.max_error_rate < 1:
            raise ValueError(f"max_error_rate must be in [0, 1), got {self.max_error_rate}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")


@dataclass(slots=True)
class RunResult:
    records: list[RequestRecord]
    loop_lag_at_ns: np.ndarray | list  # when each loop-lag tick woke ... (int64: a day's are 8.6 million)
    loop_lag_ns: np.ndarray | list  # ... and how late
    t0_ns: int
    t0_unix: float | None  # None: a journal from before t0_unix was kept
    interrupted: bool = False
    load_info: dict = field(default_factory=dict)  # what the executor reports (e.g. ramp_s)
    server_window: Window | None = None  # the server's counters over the measurement
    loop_lag_worker: np.ndarray | list = field(default_factory=list)  # whose loop each tick was (empty: one)
    time_scale: float = 1.0  # its timestamps are in emulated time at this scale (loadgen.load.timescale)
    journaled: bool = False  # its records are in spec.journal's files, not in `records`

    def loop_lag(self) -> tuple:
        """The self-check's input: tick times, their lags, and which worker's loop each was."""
        return self.loop_lag_at_ns, self.loop_lag_ns, self.loop_lag_worker if len(self.loop_lag_worker) else None


def _prepare_fds(need: int) -> None:
    """Room for `need` open files, claimed before the run starts.

    Raises the soft limit if it is lower, and makes the kernel grow this process's file
    descriptor table now: it grows in powers of two as descriptors are opened, and growing it
    stalled the whole client for ~19 ms mid-run (measured when the 256th connection opened),
    delaying every timestamp in flight. The table never shrinks, so a descriptor placed once
    at the top and closed again keeps the room."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    top = min(need, soft) - 1
    if top > 3:
        fd = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(fd, top)
            os.close(top)
        except OSError:
            pass
        finally:
            os.close(fd)


def session_for(load: Shape, share: Share = Share()) -> aiohttp.ClientSession:
    """The run's (or a worker's share of it) HTTP session, with enough file descriptors for
    its connections."""
    limit = share.split(load.max_in_flight) if load.max_in_flight else None
    _prepare_fds(2 * (limit or 4096) + 64)
    from loadgen.client import make_session

    return make_session(limit)


CLIENT_PATH_ENV = "LOADGEN_CLIENT_PATH"  # "python": the pure-Python path even where the compiled one serves


def stream_client(spec: RunSpec, headers: dict, session: aiohttp.ClientSession):
    """The run's streaming client: the compiled path (loadgen/client/compiled.py) where it was
    built and serves the URL, else the pure-Python one over `session` (loadgen/client/stream.py)."""
    from loadgen.client import compiled

    timeout_s = spec.request_timeout_s * spec.time_scale
    path = os.environ.get(CLIENT_PATH_ENV, "compiled")
    if path not in ("compiled", "python"):
        raise LoadgenError(f"{CLIENT_PATH_ENV}={path!r}: give compiled (the default) or python")
    if path == "compiled" and compiled.serves(spec.api_base):
        compiled.bounds(reset=True)  # this run's chunks only
        compiled.stamps(reset=True)
        return compiled.CompiledClient(spec.api_base, spec.endpoint, headers, timeout_s, keep_text=spec.keep_text)
    from loadgen.client.stream import StreamClient  # aiohttp: loaded by a real run only

    return StreamClient(session, spec.api_base, spec.endpoint, headers, timeout_s, keep_text=spec.keep_text)


def client_info(client, session: aiohttp.ClientSession) -> dict:
    """Which path measured and where its chunk times were taken (the summary's self-check says
    both); on the compiled path, how late each chunk's time can be (`chunk_bound`: [(ns,
    chunks)], the view the self-check judges there)."""
    from loadgen.client import compiled

    if isinstance(client, compiled.CompiledClient):
        reads = compiled.stamps()  # as the stamps arrived, not as the socket option was asked
        return {
            "client_path": "compiled",
            "chunk_times": compiled.chunk_times(reads),
            "chunk_time_reads": reads,
            "chunk_bound": compiled.bounds(),
        }
    from loadgen.client.stream import chunk_times

    return {"client_path": "python", "chunk_times": chunk_times(session)}


class _Sender:
    """Each request sent: its record made, seen by `on_start`, sent by the client, then
    journaled (and gone from memory here) or kept, counted for the error rate and handed to
    `on_record`. `journal` is set when the clock starts."""

    def __init__(self, spec: RunSpec, client, share: Share, errors: ErrorRate, on_start, on_record) -> None:
        self.spec, self.client, self.share, self.errors = spec, client, share, errors
        self.on_start, self.on_record = on_start, on_record
        self.records: list[RequestRecord] = []
        self.journal: Journal | Relay | None = None

    async def send(self, item: Item, t_sched: int | None, queue_delay: int) -> RequestRecord:
        req, spec = item.request, self.spec
        rec = RequestRecord(
            index=item.index,
            request_id=req.id,
            warmup=item.warmup,
            t_scheduled_ns=t_sched or 0,
            workload=req.workload,
            category=req.category,
            max_tokens=req.max_tokens,
            queue_delay_ns=queue_delay,
            worker=self.share.worker,
            session=req.session,
            turn=req.turn,
        )
        if spec.token_ids and not req.sensitive:
            rec.token_ids = []
        if req.followups:
            rec.chunk_text = []  # its reply goes into the conversation's next turn
        if self.journal is None:
            self.records.append(rec)
        if self.on_start is not None:
            self.on_start(rec)
        try:
            await self.client.send(rec, item.body)
        finally:
            if t_sched is None:
                rec.t_scheduled_ns = rec.t_send_ns
            if self.journal is not None:  # finished (or cut off): written, and gone from memory here
                self.journal.add(rec, text=spec.keep_text and not req.sensitive)
        self.errors.observe(rec)
        if self.on_record is not None:
            self.on_record(rec)
        return rec


def _encoder(spec: RunSpec) -> Callable[[Request], bytes]:
    """A request's body as this run sends it."""
    opts = stream_options(spec.continuous_usage)
    extra = {**(spec.extra_body or {}), "return_token_ids": True} if spec.token_ids else spec.extra_body

    def encode(req: Request) -> bytes:
        return build_body(req, endpoint=spec.endpoint, model=spec.model, options=opts, extra=extra)

    return encode


def _schedule(spec: RunSpec) -> np.ndarray | list[float]:
    """The shape's schedule in real seconds, computed before the clock starts (so it costs no
    request lateness): when each closed-loop user joins, or when each open-loop request is due."""
    load, scale = spec.load, spec.time_scale
    if load.closed:
        return [t * scale for t in load.join_s(closed_loop.JOIN_GAP_S)]
    total = None if spec.num_requests is None else spec.num_requests + spec.warmup
    return load.arrivals_s(num=total, duration_s=spec.duration_s, seed=spec.seed) * scale


def _start_clock(spec: RunSpec, t0_ns: int | None) -> tuple[int, float, int | None]:
    """(t0 in monotonic ns, t0 as a Unix time, the duration's deadline in ns or None), with
    Python's full garbage collections kept off what was alive before: they scan every object
    alive (pandas, numpy, aiohttp: a few hundred thousand) and stopped the client for 20-30 ms
    mid-run; frozen, those are skipped and a collection only walks what the run created."""
    gc.collect()
    gc.freeze()
    now = time.monotonic_ns()
    t0 = now if t0_ns is None else t0_ns
    t0_unix = time.time() + (t0 - now) / 1e9
    deadline = None if spec.duration_s is None else t0 + int(spec.duration_s * spec.time_scale * 1e9)
    return t0, t0_unix, deadline


def _journal(spec: RunSpec, share: Share, relay: Relay | None, t0: int, t0_unix: float) -> Journal | Relay | None:
    """Where finished requests go: the run's journal file (this worker's part), a relay for
    another process to fetch, or none (kept in memory)."""
    if spec.journal is not None:
        header = {
            "t0_ns": t0,
            "t0_unix": t0_unix,
            "worker": share.worker,
            "workers": share.workers,
            "time_scale": spec.time_scale,
        }
        return Journal(path_for(spec.journal, share.worker, spec.journal_part), header)
    return relay


def _executor(spec: RunSpec, feed: Feed, sender: _Sender, encode, schedule, t0: int, share: Share):
    """The shape's executor over the feed (a conversation's later turns sent by `conversing`),
    from t0: closed-loop users joining at their times, or open-loop requests due at theirs."""
    send = conversing(
        sender.send, encode, feed, think=spec.think, seed=spec.seed, scale=spec.time_scale, keep_text=spec.keep_text
    )
    load = spec.load
    if load.closed:
        return closed_loop.run(feed, send, join_s=cast(list, schedule), t0_ns=t0, share=share)
    return open_loop.run(
        feed, send, offsets_s=cast(np.ndarray, schedule), t0_ns=t0, max_concurrency=load.max_concurrency, share=share
    )


async def _until_done_or_stopped(task: asyncio.Future, stop: asyncio.Event, feed: Feed, errors: ErrorRate):
    """The load's outcome: (interrupted, its load info). Stopped early, the feed stops and the
    requests in flight are cancelled; `interrupted` only when stopped from outside, not for the
    error rate."""
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task.done():
        return False, await task  # re-raises a fault of the executor itself
    feed.stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return errors.tripped is None, {}


async def execute(
    spec: RunSpec,
    requests: Iterator[Request],
    *,
    session: aiohttp.ClientSession | None = None,
    stop: asyncio.Event | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_start: Callable[[RequestRecord], None] | None = None,
    share: Share = Share(),
    t0_ns: int | None = None,
    on_measure_start: Callable[[], None] | None = None,
    relay: Relay | None = None,
) -> RunResult:
    """Run the load; `stop` ends it early (in-flight requests are cancelled and recorded as
    such; finished ones are all kept). `on_start` and `on_record` see each request as it is
    sent and when it is done; `on_measure_start` hears when the first request past warm-up
    goes (when the server window is not scraped here). With a `share`, only that worker's part of the load, from `t0_ns`
    (a `monotonic_ns` time, the same in every worker; default: now). A `relay` (without
    spec.journal) journals the finished requests for another process to fetch (a Ray actor's)."""
    own_session = session is None
    if session is None:
        session = session_for(spec.load, share)
    headers = spec.headers if spec.keep_alive else {**spec.headers, "Connection": "close"}
    client = stream_client(spec, headers, session)
    encode = _encoder(spec)
    stop = stop if stop is not None else asyncio.Event()
    errors = ErrorRate(spec.max_error_rate, stop)
    sender = _Sender(spec, client, share, errors, on_start, on_record)
    schedule = _schedule(spec)
    window = RunWindow(spec)
    await window.start()
    monitor = LoopLagMonitor()
    t0, t0_unix, deadline = _start_clock(spec, t0_ns)
    journal = sender.journal = _journal(spec, share, relay, t0, t0_unix)
    feed = Feed(
        requests,
        encode,
        num=spec.num_requests,
        warmup=spec.warmup,
        deadline_ns=deadline,
        on_measure_start=_both(window.measuring, on_measure_start),
        share=share,
        skip=spec.skip,
    )
    work = _executor(spec, feed, sender, encode, schedule, t0, share)
    monitor.start()
    if journal is not None:
        journal.start(monitor)
    interrupted = False
    load_info: dict = {}
    try:
        interrupted, load_info = await _until_done_or_stopped(asyncio.ensure_future(work), stop, feed, errors)
        load_info = {**load_info, **client_info(client, session)}
        if errors.tripped is not None:
            load_info["stopped_early"] = errors.tripped
    finally:
        gc.unfreeze()  # what was alive before the run can be collected again (sweeps run many)
        await monitor.stop()
        if journal is not None:  # every send ended through its `finally`: all are written
            journal.close(end_of(interrupted, load_info))
        server_window = await window.close()
        await client.close()
        if own_session:
            await session.close()
    return RunResult(
        sender.records,
        np.frombuffer(monitor.at_ns, dtype=np.int64).copy(),
        np.frombuffer(monitor.lag_ns, dtype=np.int64).copy(),
        t0,
        t0_unix,
        interrupted,
        load_info,
        server_window,
        journaled=journal is not None,
    )


ERROR_WINDOW = 20  # finished requests the error rate is judged over


class ErrorRate:
    """`--max-error-rate`: over the last ERROR_WINDOW finished requests (cancelled ones aside),
    the share that failed; above the bound, the run is stopped and `tripped` says why. With
    several workers (processes or Ray actors) the parent holds the one judgement: each worker
    reports its finished requests' outcomes (`outcome`) and the parent `count`s them in the
    order they ended."""

    def __init__(self, bound: float | None, stop: asyncio.Event) -> None:
        from collections import deque

        self.bound, self.stop = bound, stop
        self.last: deque[bool] = deque(maxlen=ERROR_WINDOW)
        self.tripped: str | None = None

    @staticmethod
    def outcome(rec: RequestRecord) -> tuple[int, bool, str | None] | None:
        """What the judgement needs of a finished request: (when it ended, ok, error type);
        None for a cancelled one, which says nothing about the server."""
        return None if rec.error_type == "cancelled" else (rec.t_end_ns, rec.ok, rec.error_type)

    def observe(self, rec: RequestRecord) -> None:
        if rec.error_type != "cancelled":
            self.count(rec.ok, rec.error_type)

    def count_reported(self, outcomes) -> None:
        """A worker's reported outcomes (`outcome`'s), in the order they ended."""
        for _, ok, kind in sorted(outcomes, key=lambda outcome: outcome[0]):
            self.count(ok, kind)

    def count(self, ok: bool, error_type: str | None = None) -> None:
        if self.bound is None or self.tripped is not None:
            return
        self.last.append(not ok)
        failed = sum(self.last)
        if len(self.last) == ERROR_WINDOW and failed / ERROR_WINDOW > self.bound:
            kinds = error_type or "errors"
            self.tripped = (
                f"{failed} of the last {ERROR_WINDOW} requests failed (last: {kinds}), over "
                f"--max-error-rate {self.bound:g}: the server looks down; stopped early"
            )
            self.stop.set()


def _both(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    if then is None:
        return first

    def both() -> None:
        first()
        then()

    return both
