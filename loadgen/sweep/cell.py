"""One cell of a sweep: warm-up, then the measured run with the server's counters scraped
around it, summarised as `loadgen run` summarises a run, plus what the cell was and how it
ended."""
from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from loadgen import backends
from loadgen.backends.workers import WorkloadRef
from loadgen.client.endpoint import EndpointError, probe
from loadgen.config import clock, run_config
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from loadgen.load import scrape, timescale
from loadgen.load.execute import RunSpec, execute, session_for, stop_on_signals
from loadgen.shapes import Shape
from loadgen.shapes import options as shape_options
from loadgen.sweep.plan import Cell, Plan


@dataclass
class CellResult:
    frame: pd.DataFrame
    summary: dict
    interrupted: bool


class CellError(RuntimeError):
    """The cell could not be measured at all (its server refused the time scale)."""


WARMUP_TOKENS = 16  # a warm-up request's answer, at most: it warms the server and the connection,
                    # its length measures nothing (and at a time scale S costs S times as long)


def _short(requests):
    return (dataclasses.replace(r, max_tokens=min(r.max_tokens, WARMUP_TOKENS)) for r in requests)


def load_shape(plan: Plan, cell: Cell) -> Shape:
    """The cell's load, built by the shape family from options as `loadgen run` builds it: the
    plan's own shape, or the closed or open loop at the cell's level."""
    if plan.shape is not None:
        given = plan.shape
    elif cell.mode == "closed":
        given = {"concurrency": int(cell.level)}
    else:
        given = {"rate": cell.level, "arrival": plan.arrival,
                 "burstiness": plan.burstiness if plan.arrival == "gamma" else None}
    return shape_options.from_options(shape_options.options(**given))


async def _measure(plan: Plan, cell: Cell, workload, url: str, model: str,
                   on_record: Callable | None, api_key: str | None, on_start: Callable | None = None,
                   time_scale: float | None = None) -> tuple:
    load = load_shape(plan, cell)
    common = dict(api_base=url + "/v1", model=model, load=load, endpoint=plan.endpoint,
                  request_timeout_s=plan.request_timeout_s,
                  headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    stop = asyncio.Event()
    with stop_on_signals(asyncio.get_running_loop(), stop):
        return await _measure_cell(plan, cell, workload, url, model, on_record, on_start, common, stop,
                                   time_scale)


async def _measure_cell(plan: Plan, cell: Cell, workload, url: str, model: str, on_record, on_start,
                        common: dict, stop: asyncio.Event, time_scale: float | None) -> tuple:
    session = session_for(common["load"])
    try:
        try:  # llama.cpp wants a connection per request (loadgen.client.endpoint.CLOSE_AFTER_STREAM)
            common["keep_alive"] = (await probe(session, common["api_base"], common["headers"], model)).keep_alive
        except EndpointError:
            pass  # the requests will say what is wrong
        if time_scale is not None:  # the emulator runs this level at its scale (plan.scale_for)
            try:
                await timescale.set_server_scale(session, common["api_base"], time_scale, common["headers"])
            except timescale.TimeScaleError as e:
                raise CellError(str(e)) from None
        # the scale the server says it runs at: its figures are converted by it (1: a real server)
        common["time_scale"] = await timescale.server_scale(session, url + "/metrics") or 1.0
        if time_scale is not None and common["time_scale"] != time_scale:
            raise CellError(f"the emulator reports time scale {common['time_scale']:g}, not the {time_scale:g} "
                            "it was asked for (requests still in flight from before the cell?)")
        if plan.warmup:  # before the window opens: its requests are not in the server's counters
            warm = RunSpec(num_requests=plan.warmup, seed=plan.seed + 1, **common)
            await execute(warm, _short(workload.requests(None, plan.seed + 1)), session=session, stop=stop,
                          on_start=on_start, on_record=on_record)
        spec = RunSpec(num_requests=plan.requests_for(cell), duration_s=plan.duration_s,
                       seed=plan.seed, metrics_url=url + "/metrics", **common)
        if stop.is_set():
            return spec, None
        # the same measured requests in every cell, so variants and levels see the same work
        workers = plan.workers_for(cell)
        backend = backends.choose(workers, WorkloadRef(plan.workload_spec(cell.workload), plan.data_dir))
        if backend.local:
            backend = backends.InProcess(session)
        result = await backend.execute(spec, workload.requests(None, plan.seed), stop=stop,
                                       on_record=on_record, on_start=on_start)
        return spec, result
    finally:
        await session.close()


def run_cell(plan: Plan, cell: Cell, workload, url: str, model: str,
             on_record: Callable | None = None, api_key: str | None = None,
             on_start: Callable | None = None, goodput: dict | None = None,
             time_scale: float | None = None) -> CellResult | None:
    """Run the cell (on an emulator, at `time_scale`: set before the cell); None when it was
    interrupted before its measurement began. CellError when it cannot be measured at all."""
    t_start = time.time()
    spec, result = asyncio.run(_measure(plan, cell, workload, url, model, on_record, api_key, on_start,
                                        time_scale))
    if result is None:
        return None
    timescale.to_emulated(result, spec.time_scale)
    frame = request_frame(result.records)
    seen = sorted(set(timescale.window_scales(result.server_window)) - {spec.time_scale})
    config = run_config(
        "sweep", base_url=spec.api_base, model=model, endpoint=spec.endpoint, load=spec.load.describe(),
        num_requests=spec.num_requests, duration_s=spec.duration_s, warmup=plan.warmup, seed=plan.seed,
        workload=workload.describe(), clock=clock(result.t0_ns, result.t0_unix),
        warmup_separate=True, request_timeout_s=spec.request_timeout_s, continuous_usage_requested=True,
        metrics_url=spec.metrics_url, api_key_provided=bool(api_key), keep_alive=spec.keep_alive,
        workers=plan.workers_for(cell), time_scale=spec.time_scale, time_scale_requested=time_scale,
        started_unix=t_start)
    summary = summarize(frame, result.loop_lag(), config=config,
                        interrupted=result.interrupted, load_info=result.load_info, goodput=goodput,
                        server_figures=scrape.figures(result.server_window))
    if seen:  # converted by one scale, served (partly) at another: the figures are not the hardware's
        summary["time_scale_error"] = (f"the emulator ran at time scale {', '.join(f'{x:g}' for x in seen)} "
                                       f"during the cell, whose figures were converted at {spec.time_scale:g}")
    return CellResult(frame, summary, result.interrupted)
