"""One cell of a sweep: warm-up, then the measured run with the server's counters scraped
around it, summarised as `loadgen run` summarises a run, plus what the cell was and how it
ended."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from loadgen import __version__
from loadgen.endpoint import EndpointError, probe
from loadgen.measure import request_frame
from loadgen.run import LoadShape, RunSpec, execute, session_for, stop_on_signals
from loadgen.summary import summarize
from loadgen.sweep.plan import Cell, Plan
from loadgen.workers import WorkloadRef, execute_workers


@dataclass
class CellResult:
    frame: pd.DataFrame
    summary: dict
    interrupted: bool


def load_shape(plan: Plan, cell: Cell) -> LoadShape:
    if cell.mode == "closed":
        return LoadShape(concurrency=int(cell.level))
    return LoadShape(rate=cell.level, arrival=plan.arrival, burstiness=plan.burstiness)


async def _measure(plan: Plan, cell: Cell, workload, url: str, model: str,
                   on_record: Callable | None, api_key: str | None, on_start: Callable | None = None) -> tuple:
    load = load_shape(plan, cell)
    common = dict(api_base=url + "/v1", model=model, load=load, endpoint=plan.endpoint,
                  request_timeout_s=plan.request_timeout_s,
                  headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    stop = asyncio.Event()
    with stop_on_signals(asyncio.get_running_loop(), stop):
        return await _measure_cell(plan, cell, workload, url, model, on_record, on_start, common, stop)


async def _measure_cell(plan: Plan, cell: Cell, workload, url: str, model: str, on_record, on_start,
                        common: dict, stop: asyncio.Event) -> tuple:
    session = session_for(common["load"])
    try:
        try:  # llama.cpp wants a connection per request (loadgen.endpoint.CLOSE_AFTER_STREAM)
            common["keep_alive"] = (await probe(session, common["api_base"], common["headers"], model)).keep_alive
        except EndpointError:
            pass  # the requests will say what is wrong
        if plan.warmup:  # before the window opens: its requests are not in the server's counters
            warm = RunSpec(num_requests=plan.warmup, seed=plan.seed + 1, **common)
            await execute(warm, workload.requests(None, plan.seed + 1), session=session, stop=stop,
                          on_start=on_start, on_record=on_record)
        spec = RunSpec(num_requests=plan.requests_for(cell), duration_s=plan.duration_s,
                       seed=plan.seed, metrics_url=url + "/metrics", **common)
        if stop.is_set():
            return spec, None
        # the same measured requests in every cell, so variants and levels see the same work
        workers = plan.workers_for(cell)
        if workers > 1:
            source = WorkloadRef(plan.workload_spec(cell.workload), plan.data_dir)
            return spec, await execute_workers(spec, source, workers, stop=stop)
        result = await execute(spec, workload.requests(None, plan.seed), session=session, stop=stop,
                               on_record=on_record, on_start=on_start)
        return spec, result
    finally:
        await session.close()


def run_cell(plan: Plan, cell: Cell, workload, url: str, model: str,
             on_record: Callable | None = None, api_key: str | None = None,
             on_start: Callable | None = None, goodput: dict | None = None) -> CellResult | None:
    """Run the cell; None when it was interrupted before its measurement began."""
    t_start = time.time()
    spec, result = asyncio.run(_measure(plan, cell, workload, url, model, on_record, api_key, on_start))
    if result is None:
        return None
    frame = request_frame(result.records)
    config = {
        "command": "sweep", "loadgen_version": __version__, "base_url": spec.api_base,
        "model": model, "endpoint": spec.endpoint,
        "load": spec.load.describe(),
        "num_requests": spec.num_requests, "duration_s": spec.duration_s, "warmup": plan.warmup,
        "warmup_separate": True, "seed": plan.seed, "workload": workload.describe(),
        "request_timeout_s": spec.request_timeout_s, "continuous_usage_requested": True,
        "metrics_url": spec.metrics_url, "api_key_provided": bool(api_key), "keep_alive": spec.keep_alive,
        "workers": plan.workers_for(cell),
        "started_unix": t_start,
        "clock": {"t0_ns": result.t0_ns, "t0_unix": result.t0_unix, "clock": "monotonic"},
    }
    summary = summarize(frame, result.loop_lag(), config=config,
                        interrupted=result.interrupted, load_info=result.load_info, goodput=goodput,
                        server_window=result.server_window)
    return CellResult(frame, summary, result.interrupted)
