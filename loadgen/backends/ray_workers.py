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
import pyarrow as pa

from loadgen.backends.worker_processes import check_workers, merge
from loadgen.client import columnar
from loadgen.executors import Share
from loadgen.load.execute import ErrorRate, RunResult, RunSpec, execute, session_for
from loadgen.load.scrape import RunWindow
from loadgen.load.workload import WorkloadRef
from loadgen.outputs.journal import Journal, Relay, end_of, path_for

START_MARGIN_S = 1.0  # from naming the start to it: the calls must reach every node first


def _offset_ns() -> int:
    """This host's wall clock minus its monotonic clock."""
    return time.time_ns() - time.monotonic_ns()


class Worker:
    """A Ray actor (async: its methods share one event loop) sending one share of a run."""

    def __init__(
        self, spec: RunSpec, workload: WorkloadRef, share: Share, outcomes: bool = False, relay: bool = False
    ) -> None:
        self.spec, self.workload, self.share = spec, workload, share
        self.relay = Relay() if relay else None  # finished requests journaled for the driver to fetch
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

    async def run(self, t0_unix_ns: int) -> tuple[RunResult, list, list]:
        """The share's result, and the journal batches the driver has not fetched yet."""

        def counted(rec) -> None:
            self.done += 1
            self.failed += not rec.ok
            if self.outcomes and (o := ErrorRate.outcome(rec)) is not None:
                self.ended.append(o)

        try:
            result = await execute(
                self.spec,
                self.requests,
                session=self.session,
                stop=self.stop,
                on_record=counted,
                share=self.share,
                t0_ns=t0_unix_ns - _offset_ns(),
                relay=self.relay,
            )
            return (result, *self.relay.take()) if self.relay is not None else (result, [], [])
        finally:
            await self.session.close()

    async def progress(self) -> tuple[int, int, list, list, list]:
        """Since the last call: requests done and failed, their outcomes (for --max-error-rate)
        and the journal's batches of records and lag ticks."""
        batches, lags = self.relay.take() if self.relay is not None else ([], [])
        out = (self.done, self.failed, self.ended, batches, lags)
        self.done, self.failed, self.ended = 0, 0, []
        return out

    async def halt(self) -> None:
        self.stop.set()


_TIMES = ("t_scheduled_ns", "t_call_ns", "t_send_ns", "t_headers_ns", "t_end_ns")


def shift_batch(batch: pa.RecordBatch, delta_ns: int) -> pa.RecordBatch:
    """A journal batch (its encoded form: each chunk list's first time absolute, the rest
    differences) with every timestamp moved by `delta_ns`, as `shift` moves a record's."""
    if not delta_ns:
        return batch
    cols = []
    for name in batch.schema.names:
        col = batch.column(name)
        if name in _TIMES:
            v = col.to_numpy(zero_copy_only=False)
            col = pa.array(np.where(v != 0, v + delta_ns, 0))
        elif name == "chunk_t_ns":
            values, offsets = columnar.flat(col)
            values = values.copy()
            values[offsets[:-1][np.diff(offsets) > 0]] += delta_ns  # each list's first time: the rest are gaps
            col = columnar.lists(values, offsets)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def shift_lag(batch: pa.RecordBatch, delta_ns: int) -> pa.RecordBatch:
    if not delta_ns:
        return batch
    at = pa.array(batch.column(0).to_numpy() + delta_ns)
    return pa.RecordBatch.from_arrays([at, batch.column(1)], schema=batch.schema)


def shift(result: RunResult, delta_ns: int) -> RunResult:
    """`result` with every timestamp moved by `delta_ns` (onto another host's clock)."""
    if delta_ns:
        for rec in result.records:
            for name in ("t_scheduled_ns", "t_call_ns", "t_send_ns", "t_headers_ns", "t_end_ns"):
                if getattr(rec, name):
                    setattr(rec, name, getattr(rec, name) + delta_ns)
            if len(rec.chunk_t_ns):
                rec.chunk_t_ns = array("q", (np.frombuffer(rec.chunk_t_ns, dtype=np.int64) + delta_ns).tobytes())
        result.loop_lag_at_ns = np.asarray(result.loop_lag_at_ns, dtype=np.int64) + delta_ns
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
    # this process scrapes the server; the actors' nodes cannot write to this host's results
    # directory, so with a journal their finished requests are fetched as they go (with the
    # progress, twice a second) and journaled here; without one they come back at the end
    worker_spec = dataclasses.replace(spec, metrics_url=None, journal=None, max_error_rate=None)
    errors = ErrorRate(spec.max_error_rate, asyncio.Event())
    relayed = spec.journal is not None
    actors = [
        actor.options(num_cpus=1, scheduling_strategy="SPREAD", name=None).remote(
            worker_spec, workload, Share(w, workers), spec.max_error_rate is not None, relayed
        )
        for w in range(workers)
    ]
    journals: dict[int, Journal] = {}
    window = RunWindow(spec, from_start=True)  # the actors do not say when warm-up ends
    try:
        infos = await asyncio.wait_for(asyncio.gather(*[_get(a.prepare.remote()) for a in actors]), start_timeout_s)
        await window.start()
        here, mine = socket.gethostname(), _offset_ns()
        t0_unix = time.time_ns() + int(START_MARGIN_S * 1e9)
        delta = {w: 0 if info["host"] == here else info["offset_ns"] - mine for w, info in enumerate(infos)}
        if relayed:
            journals.update(_journals(spec, workers, t0_unix, mine))

        def journal(w: int, batches: list, lags: list) -> None:
            for batch in batches:
                journals[w].write_batch(shift_batch(batch, delta[w]))
            for lag in lags:
                journals[w].write_lag(shift_lag(lag, delta[w]))

        runs = {w: asyncio.ensure_future(_get(a.run.remote(t0_unix))) for w, a in enumerate(actors)}
        results, lost, halted = {}, {}, False
        while runs:
            done, _ = await asyncio.wait(runs.values(), timeout=0.5)
            for w, fut in list(runs.items()):
                if fut in done:
                    del runs[w]
                    try:
                        result, batches, lags = fut.result()
                        results[w] = shift(result, delta[w])
                        if relayed:
                            journal(w, batches, lags)
                            journals.pop(w).close(end_of(result.interrupted, result.load_info))
                    except Exception as e:  # the actor died (its node lost, its process killed)
                        kept = "its requests journaled by then are kept" if relayed else "its requests are lost"
                        lost[w] = f"worker {w} on {infos[w]['host']} was lost mid-run ({type(e).__name__}); {kept}"
            if (on_progress is not None or errors.bound is not None or relayed) and runs:
                await _poll(actors, list(runs), on_progress, errors, journal if relayed else None, journals)
            if ((stop is not None and stop.is_set()) or errors.tripped is not None) and not halted:
                halted = True
                for w in runs:
                    actors[w].halt.remote()
        out = merge(results, lost, workers, t0_unix - mine, t0_unix / 1e9, await window.close(), errors.tripped)
        out.load_info["worker_nodes"] = {w: {"host": i["host"], "node_id": i["node_id"]} for w, i in enumerate(infos)}
        return out
    finally:
        for j in journals.values():  # a lost actor's: what was fetched is kept, without an end
            j.close()
        for a in actors:
            ray.kill(a)


def _journals(spec: RunSpec, workers: int, t0_unix: int, mine: int) -> dict[int, Journal]:
    """Each actor's journal, written here on this host's clock (its records shifted as they
    come)."""
    assert spec.journal is not None
    out = {}
    for w in range(workers):
        header = {
            "t0_ns": t0_unix - mine,
            "t0_unix": t0_unix / 1e9,
            "worker": w,
            "workers": workers,
            "time_scale": spec.time_scale,
        }
        out[w] = Journal(path_for(spec.journal, w, spec.journal_part), header)
    return out


async def _poll(actors, polled: list[int], on_progress, errors: ErrorRate, journal, journals: dict) -> None:
    """The running actors' progress (for `on_progress`), their finished requests' outcomes
    (for the error rate) and, relayed, their finished requests journaled here."""
    got_all = await asyncio.gather(*[_get(actors[w].progress.remote()) for w in polled], return_exceptions=True)
    for w, got in zip(polled, got_all):
        if isinstance(got, BaseException):
            continue
        if on_progress is not None:
            on_progress(got[0], got[1])
        errors.count_reported(got[2])
        if journal is not None and w in journals:
            journal(w, got[3], got[4])


async def _get(ref):
    return await ref
