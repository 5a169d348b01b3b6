"""One run's load from several processes on one host (`--workers N`).

One asyncio process reads some hundreds of thousands of chunks per second unpaced, fewer when
every chunk must be timed to the millisecond (docs/performance.md). With N workers the run's
one load is split (`executors.Share`): worker w sends requests w, w + N, w + 2N, ... of the one
numbering, each at its scheduled time from the one arrival schedule (closed loop: users w,
w + N, ...). Every worker opens the same workload with the same seed, so all hold the same
request sequence without shipping it between processes.

Workers are spawned (fresh interpreters: no event loop or pool crosses a fork), get ready
(imports, workload, connection pool), and then all start at one `t0` on CLOCK_MONOTONIC, which
every process on a host shares: their timestamps are one clock. Each worker times its own
streams on its own event loop and watches its own loop's lag. The parent scrapes the server's
metrics around the whole run and merges the workers' records into one `RunResult`, identical
in form to a single process's (`worker` says whose a record is), with each worker's loop-lag
ticks kept apart, so the self-check matches every chunk to the loop that took it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import signal
import time
from collections.abc import Callable

import numpy as np

from loadgen.executors import Share
from loadgen.load.execute import ErrorRate, RunResult, RunSpec, execute, session_for
from loadgen.load.scrape import RunWindow, Window
from loadgen.load.workload import WorkloadRef

START_MARGIN_S = 0.05  # from the go message to t0: every worker is waiting on its timers by then


class WorkerError(Exception):
    """A worker could not start; the message says which and why."""


def check_workers(workers: int, spec: RunSpec) -> None:
    """ValueError naming the limit when the load cannot be split `workers` ways."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    cap = spec.load.max_in_flight
    if cap is not None and workers > cap:
        what = "concurrency" if spec.load.closed else "max_concurrency"
        raise ValueError(
            f"workers ({workers}) must be at most the {what} ({cap}): each worker needs a user (a slot) of its own"
        )


# -- in the worker process ---------------------------------------------------------------------


def _worker_main(conn, spec: RunSpec, workload: WorkloadRef, share: Share, outcomes: bool = False) -> None:
    from servers.launcher import die_with_parent

    die_with_parent()  # the parent killed outright: this worker goes too
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the loop handles it (a Ctrl-C reaches all)
    try:
        asyncio.run(_work(conn, spec, workload, share, outcomes))
    except (BrokenPipeError, EOFError):
        pass  # the parent is gone: nobody to report to
    finally:
        conn.close()


async def _work(conn, spec: RunSpec, workload: WorkloadRef, share: Share, outcomes: bool) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # the worker's last loop: nothing to give back after it
        loop.add_signal_handler(sig, stop.set)
    inbox: asyncio.Queue = asyncio.Queue()

    def readable() -> None:
        try:
            inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            inbox.put_nowait(("stop",))

    requests = workload.open().requests(None, spec.seed)
    session = session_for(spec.load, share)
    try:  # closed on every way out: the parent may be gone before this worker is ready
        loop.add_reader(conn.fileno(), readable)
        conn.send(("ready",))
        go = await inbox.get()
        if go[0] != "start":
            return
        result, done = await _measure(conn, spec, requests, session, share, go[1], inbox, stop, loop, outcomes)
    finally:
        await session.close()
    if done[0]:
        conn.send(("progress", *done))
    conn.send(("result", result))


async def _measure(
    conn,
    spec: RunSpec,
    requests,
    session,
    share: Share,
    t0_ns: int,
    inbox: asyncio.Queue,
    stop: asyncio.Event,
    loop,
    outcomes: bool,
) -> tuple:
    """The worker's share of the run from `t0_ns`, reporting progress twice a second (with
    `outcomes`, each finished request's ErrorRate.outcome too, for the parent's one judgement of
    --max-error-rate); the result and the progress not yet reported."""
    done = failed = 0
    ended: list = []

    def on_record(rec) -> None:
        nonlocal done, failed
        done += 1
        failed += not rec.ok
        if outcomes and (o := ErrorRate.outcome(rec)) is not None:
            ended.append(o)

    def report() -> None:  # progress twice a second, not a message per request
        nonlocal done, failed, ended
        if done:
            conn.send(("progress", done, failed, ended))
            done, failed, ended = 0, 0, []
        ticker[0] = loop.call_later(0.5, report)

    async def listen() -> None:
        while (await inbox.get())[0] != "stop":
            pass
        stop.set()

    ticker = [loop.call_later(0.5, report)]
    listener = loop.create_task(listen())
    try:
        result = await execute(
            spec,
            requests,
            session=session,
            stop=stop,
            on_record=on_record,
            share=share,
            t0_ns=t0_ns,
            on_measure_start=lambda: conn.send(("measuring",)),
        )
    finally:
        ticker[0].cancel()
        listener.cancel()
        loop.remove_reader(conn.fileno())
    return result, (done, failed, ended)


# -- in the parent -----------------------------------------------------------------------------


async def execute_workers(
    spec: RunSpec,
    workload: WorkloadRef,
    workers: int,
    *,
    stop: asyncio.Event | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    start_timeout_s: float = 120.0,
) -> RunResult:
    """`execute` with the load split over `workers` processes; one merged result. A worker
    that dies mid-run loses only its own requests, and the result says so
    (`load_info["workers_lost"]`); one that cannot start raises WorkerError. --max-error-rate is
    judged here, once, over every worker's finished requests, and stops them all."""
    check_workers(workers, spec)
    pool = _Workers(spec, workers)
    window = RunWindow(spec)  # the parent scrapes the server
    stopper = None
    try:
        pool.spawn(workload)
        await pool.ready(start_timeout_s)
        if stop is not None and stop.is_set():
            pool.send_all(("stop",))
            return RunResult([], [], [], time.monotonic_ns(), time.time(), interrupted=True)
        await window.start()
        t0 = time.monotonic_ns() + int(START_MARGIN_S * 1e9)
        t0_unix = time.time() + START_MARGIN_S
        pool.send_all(("start", t0))
        if stop is not None:
            stopper = pool.loop.create_task(stop.wait())
            stopper.add_done_callback(lambda _: pool.send_all(("stop",)))
        results, lost = await pool.collect(window, on_progress)
        return merge(results, lost, workers, t0, t0_unix, await window.close(), pool.errors.tripped)
    finally:
        if stopper is not None:
            stopper.cancel()
        pool.close()


class _Workers:
    """The worker processes of one run, seen from the parent: started (spawn), each one's
    messages read off its pipe into one inbox, waited for until ready, then their progress,
    their start of measuring and their results collected; the error rate judged here, once,
    over every worker's finished requests."""

    def __init__(self, spec: RunSpec, workers: int) -> None:
        self.spec, self.workers = spec, workers
        self.loop = asyncio.get_running_loop()
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.procs: list = []
        self.conns: list = []
        self.errors = ErrorRate(spec.max_error_rate, asyncio.Event())

    def spawn(self, workload: WorkloadRef) -> None:
        ctx = multiprocessing.get_context("spawn")
        worker_spec = dataclasses.replace(self.spec, metrics_url=None, max_error_rate=None)
        for w in range(self.workers):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_worker_main,
                args=(theirs, worker_spec, workload, Share(w, self.workers), self.spec.max_error_rate is not None),
                name=f"loadgen-worker-{w}",
                daemon=True,
            )
            proc.start()
            theirs.close()
            self.procs.append(proc)
            self.conns.append(mine)
            self.loop.add_reader(mine.fileno(), self._reader(w, mine))

    def _reader(self, w: int, conn) -> Callable[[], None]:
        def readable() -> None:
            try:
                self.inbox.put_nowait((w, conn.recv()))
            except (EOFError, OSError):
                self.loop.remove_reader(conn.fileno())
                self.inbox.put_nowait((w, None))

        return readable

    def send_all(self, msg: tuple) -> None:
        for conn in self.conns:
            try:
                conn.send(msg)
            except OSError:
                pass  # that worker is gone; its end is reported

    async def ready(self, timeout_s: float) -> None:
        ready: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(ready) < self.workers:
            try:
                w, msg = await asyncio.wait_for(self.inbox.get(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise WorkerError(
                    f"--workers: {self.workers - len(ready)} worker(s) not ready after {timeout_s:g} s"
                ) from None
            if msg is None:
                self.procs[w].join(1.0)
                raise WorkerError(
                    f"--workers: worker {w} exited (code {self.procs[w].exitcode}) before it "
                    "was ready; run with --workers 1 to see its error"
                )
            ready.add(w)

    async def collect(self, window: RunWindow, on_progress) -> tuple[dict[int, RunResult], dict[int, str]]:
        """Every worker's result, or why it was lost."""
        results: dict[int, RunResult] = {}
        lost: dict[int, str] = {}
        measuring = halted = False
        while len(results) + len(lost) < self.workers:
            w, msg = await self.inbox.get()
            if msg is None:
                if w not in results:
                    self.procs[w].join(1.0)
                    lost[w] = f"worker {w} exited (code {self.procs[w].exitcode}) mid-run; " + (
                        "its requests journaled by then are kept" if self.spec.journal else "its requests are lost"
                    )
            elif msg[0] == "progress":
                if on_progress is not None:
                    on_progress(msg[1], msg[2])
                self.errors.count_reported(msg[3])
                if self.errors.tripped is not None and not halted:
                    halted = True
                    self.send_all(("stop",))
            elif msg[0] == "measuring" and not measuring:
                measuring = True
                window.measuring()
            elif msg[0] == "result":
                results[w] = msg[1]
        return results, lost

    def close(self) -> None:
        for conn in self.conns:
            try:
                self.loop.remove_reader(conn.fileno())
            except (ValueError, OSError):
                pass
            conn.close()
        for proc in self.procs:
            proc.join(5.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()


def merge(
    results: dict[int, RunResult],
    lost: dict[int, str],
    workers: int,
    t0_ns: int,
    t0_unix: float,
    window: Window | None,
    stopped_early: str | None = None,
) -> RunResult:
    """The workers' results as one run: records in numbering order, loop-lag ticks with whose
    loop each was, the ramp over every worker's first sends; `stopped_early`: why the parent
    stopped them all (--max-error-rate), which is not an interruption."""
    records: list = []
    at: list[np.ndarray] = []
    lag: list[np.ndarray] = []
    who: list[np.ndarray] = []
    firsts: list[int] = []
    where: set = set()
    paths: set = set()
    bound: dict[int, int] = {}
    reads: dict[str, int] = {}
    for w in sorted(results):
        r = results[w]
        records.extend(r.records)
        at.append(np.asarray(r.loop_lag_at_ns, dtype=np.int64))
        lag.append(np.asarray(r.loop_lag_ns, dtype=np.int64))
        who.append(np.full(len(r.loop_lag_ns), w, dtype=np.int64))
        firsts.extend(r.load_info.get("first_sends_ns") or [])
        where.add(r.load_info.get("chunk_times"))
        paths.add(r.load_info.get("client_path"))
        for ns, n in r.load_info.get("chunk_bound") or ():
            bound[ns] = bound.get(ns, 0) + n
        for how, n in (r.load_info.get("chunk_time_reads") or {}).items():
            reads[how] = reads.get(how, 0) + n
    records.sort(key=lambda rec: rec.index)
    load_info = {
        "ramp_s": (max(firsts) - min(firsts)) / 1e9 if firsts else None,
        "chunk_times": _one(where),
        "client_path": _one(paths),
        "workers": workers,
        "workers_lost": [lost[w] for w in sorted(lost)],
    }
    if bound:
        load_info["chunk_bound"] = sorted(bound.items())
    if reads:
        load_info["chunk_time_reads"] = reads
    if stopped_early:
        load_info["stopped_early"] = stopped_early
    join = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
    return RunResult(
        records,
        join(at),
        join(lag),
        t0_ns,
        t0_unix,
        interrupted=stopped_early is None and any(r.interrupted for r in results.values()),
        load_info=load_info,
        server_window=window,
        loop_lag_worker=join(who),
        journaled=any(r.journaled for r in results.values()),
    )


def _one(values: set):
    """The workers' common value, "mixed" if they differ, None if none said."""
    values.discard(None)
    return values.pop() if len(values) == 1 else ("mixed" if values else None)
