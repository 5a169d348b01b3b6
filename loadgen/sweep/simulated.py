"""`loadgen sweep --virtual`: every cell in virtual time, on the emulator's engine exactly as the
variant's `serve` command line would configure it (servers.emulator: profile, speculative config,
batch limits, prefix caching), driven by `loadgen simulate`'s client (loadgen.simulate.virtual)
instead of a server and a real-time client. No server starts and no clock is waited on: a plan
of tens of cells takes seconds, with the cells, manifest and summaries a real sweep writes, so
`loadgen report` and `compare` read it as any other. Figures are the cost model's: what the
emulated hardware would do with no client or machine in the way (never flagged client_bound);
it measures nothing about a real server, and no run-to-run variation (refused with --repeats)."""

from __future__ import annotations

import time

from loadgen.config import clock, run_config
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from loadgen.planning.plan import Cell, Plan
from loadgen.results.outcome import RunOutcome
from loadgen.simulate.job import engine_figures
from loadgen.simulate.virtual import SimSpec, simulate
from loadgen.sweep.cell import load_shape
from servers.emulator.__main__ import engine_from_command


def simulate_cell(plan: Plan, cell: Cell, workload, argv) -> RunOutcome:
    """One cell: the plan's requests for it (its measured count or duration, the sweep's seed) on
    an engine built from the variant's emulator command line `argv` (ValueError naming a bad
    flag). The warm-up a real cell sends first is left out: a simulated engine has nothing to
    warm, and the figures are the measured requests' either way."""
    engine, served = engine_from_command(argv)
    sim = SimSpec(
        engine.profile.name,
        engine.spec,
        load_shape(plan, cell),
        engine.cfg,
        num_requests=plan.requests_for(cell),
        duration_s=plan.duration_s,
        seed=plan.seed,
        endpoint=plan.endpoint,
        extra_body=dict(plan.extra_body or {}),
    )
    started, wall = time.time(), time.monotonic()
    result = simulate(sim, workload.requests(None, plan.seed), engine=engine)
    frame = request_frame(result.run.records)
    config = run_config(
        "sweep",
        base_url=f"simulated:{sim.profile}",
        model=served[0],
        endpoint=plan.endpoint,
        load=sim.load.describe(),
        num_requests=sim.num_requests,
        duration_s=sim.duration_s,
        warmup=0,
        seed=plan.seed,
        workload=workload.describe(),
        clock=clock(result.run.t0_ns, None, "virtual"),
        simulated=True,
        profile=sim.profile,
        extra_body=plan.extra_body,
        time_scale=1.0,
        started_unix=started,
    )
    engine_side = engine_figures(result, time.monotonic() - wall)
    summary = summarize(
        frame, ([], []), config=config, load_info=result.run.load_info, goodput=plan.goodput, server_figures=engine_side
    )
    summary.update(engine_side)
    return RunOutcome(frame, summary, result.run)
