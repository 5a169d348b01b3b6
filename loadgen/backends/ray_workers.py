"""One run's load from several client nodes: the workers as Ray actors
(`loadgen run --workers N --ray [ADDRESS]`).

Each actor sends one share of the load (executors.Share), exactly as a `--workers` process
does, on whichever node Ray puts it (SPREAD: across nodes while there are nodes). Hosts do not
share CLOCK_MONOTONIC, so the start is agreed in wall-clock time: the driver names a start
instant a moment ahead, each actor turns it into its own monotonic time. Afterwards each actor's
timestamps are moved onto the driver's monotonic clock by the difference between the two hosts'
(wall - monotonic) offsets. Every latency (TTFT, ITL, E2E) is a difference of two times taken on
one host and stays exact; only how runs on different hosts line up (the steady window, the send
rate) depends on their clocks agreeing (NTP within a data centre: well under a millisecond).
Actors on the driver's own host share its clock and are not moved.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from array import array
from collections.abc import Callable

import numpy as np

from loadgen.backends.worker_processes import check_workers, merge
from loadgen.executors import Share
from loadgen.load.execute import ErrorRate, RunResult, RunSpec, execute, session_for
from loadgen.load.scrape import RunWindow
from loadgen.load.workload import WorkloadRef

START_MARGIN_S = 1.0  # from naming the start to it: the calls must reach every node first


def _offset_ns() -> int:
    """This host's wall clock minus its monotonic clock."""
    return time.time_ns() - time.monotonic_ns()


class Worker:
    """A Ray actor (async: its methods share one event loop) sending one share of a run."""

    def __init__(self, spec: RunSpec, workload: WorkloadRef, share: Share, outcomes: bool = False) -> None:
        self.spec, self.workload, self.share = spec, workload, share
        self.done = self.failed = 0
        self.outcomes = outcomes  # keep each finished request's ErrorRate.outcome for the driver
        self.ended: list = []

    async def prepare(self) -> dict:
        import ray

        self.requests = self.workload.open().requests(None, self.spec.seed)
        self.session = session_for(self.spec.load, self.share)
        self.stop = asyncio.Event()
        return {
            "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "offset_ns": _offset_ns(),
        }

    async def run(self, t0_unix_ns: int) -> RunResult:
        def counted(rec) -> None:
            self.done += 1
            self.failed += not rec.ok
            if self.outcomes and (o := ErrorRate.outcome(rec)) is not None:
                self.ended.append(o)

        try:
            return await execute(
                self.spec,
                self.requests,
                session=self.session,
                stop=self.stop,
                on_record=counted,
                share=self.share,
                t0_ns=t0_unix_ns - _offset_ns(),
            )
        finally:
            await self.session.close()

    async def progress(self) -> tuple[int, int, list]:
        out = (self.done, self.failed, self.ended)
        self.done, self.failed, self.ended = 0, 0, []
        return out

    async def halt(self) -> None:
        self.stop.set()


def shift(result: RunResult, delta_ns: int) -> RunResult:
    """`result` with every timestamp moved by `delta_ns` (onto another host's clock)."""
    if delta_ns:
        for rec in result.records:
            for name in ("t_scheduled_ns", "t_call_ns", "t_send_ns", "t_headers_ns", "t_end_ns"):
                if getattr(rec, name):
                    setattr(rec, name, getattr(rec, name) + delta_ns)
            if len(rec.chunk_t_ns):
                rec.chunk_t_ns = array("q", (np.frombuffer(rec.chunk_t_ns, dtype=np.int64) + delta_ns).tobytes())
        result.loop_lag_at_ns = [t + delta_ns for t in result.loop_lag_at_ns]
        first = result.load_info.get("first_sends_ns")
        if first:
            result.load_info["first_sends_ns"] = [t + delta_ns for t in first]
    return result


async def execute_on_ray(
    ray,
    spec: RunSpec,
    workload: WorkloadRef,
    workers: int,
    *,
    stop: asyncio.Event | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    start_timeout_s: float = 300.0,
) -> RunResult:
    """`execute` with the load split over `workers` Ray actors; one merged result on this
    process's clock. An actor lost mid-run (its node gone) loses only its own requests
    (`load_info["workers_lost"]`). --max-error-rate is judged here, once, over every actor's
    finished requests (polled twice a second), and halts them all."""
    check_workers(workers, spec)
    actor = ray.remote(Worker)
    # this process scrapes the server; the actors' records come back at the end (their nodes
    # cannot write to this host's results directory)
    worker_spec = dataclasses.replace(spec, metrics_url=None, journal=None, max_error_rate=None)
    errors = ErrorRate(spec.max_error_rate, asyncio.Event())
    actors = [
        actor.options(num_cpus=1, scheduling_strategy="SPREAD", name=None).remote(
            worker_spec, workload, Share(w, workers), spec.max_error_rate is not None
        )
        for w in range(workers)
    ]
    window = RunWindow(spec, from_start=True)  # the actors do not say when warm-up ends
    try:
        infos = await asyncio.wait_for(asyncio.gather(*[_get(a.prepare.remote()) for a in actors]), start_timeout_s)
        await window.start()
        here, mine = socket.gethostname(), _offset_ns()
        t0_unix = time.time_ns() + int(START_MARGIN_S * 1e9)
        runs = {w: asyncio.ensure_future(_get(a.run.remote(t0_unix))) for w, a in enumerate(actors)}
        results, lost, halted = {}, {}, False
        while runs:
            done, _ = await asyncio.wait(runs.values(), timeout=0.5)
            for w, fut in list(runs.items()):
                if fut in done:
                    del runs[w]
                    try:
                        info = infos[w]
                        results[w] = shift(fut.result(), 0 if info["host"] == here else info["offset_ns"] - mine)
                    except Exception as e:  # the actor died (its node lost, its process killed)
                        lost[w] = (
                            f"worker {w} on {infos[w]['host']} was lost mid-run ({type(e).__name__}); "
                            "its requests are lost"
                        )
            if (on_progress is not None or errors.bound is not None) and runs:
                for got in await asyncio.gather(
                    *[_get(actors[w].progress.remote()) for w in runs], return_exceptions=True
                ):
                    if not isinstance(got, BaseException):
                        if on_progress is not None:
                            on_progress(got[0], got[1])
                        errors.count_reported(got[2])
            if ((stop is not None and stop.is_set()) or errors.tripped is not None) and not halted:
                halted = True
                for w in runs:
                    actors[w].halt.remote()
        out = merge(results, lost, workers, t0_unix - mine, t0_unix / 1e9, await window.close(), errors.tripped)
        out.load_info["worker_nodes"] = {w: {"host": i["host"], "node_id": i["node_id"]} for w, i in enumerate(infos)}
        return out
    finally:
        for a in actors:
            ray.kill(a)


async def _get(ref):
    return await ref
