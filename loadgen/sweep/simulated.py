"""`loadgen sweep --virtual`: every cell in virtual time, on the emulator's engine exactly as the
variant's `serve` command line would configure it (servers.emulator: profile, speculative config,
batch limits, prefix caching), driven by `loadgen simulate`'s client (loadgen.simulate.virtual)
instead of a server and a real-time client. No server starts and no clock is waited on: a plan
of tens of cells takes seconds, with the cells, manifest and summaries a real sweep writes, so
`loadgen report` and `compare` read it as any other. Figures are the cost model's: what the
emulated hardware would do with no client or machine in the way (never flagged client_bound);
it measures nothing about a real server, and no run-to-run variation (refused with --repeats).

With --replay (a real sweep run with --token-ids), each cell serves the requests the real cell
served, as it served them: every measured request's prompt and output token ids (so the prompt
and output tokens are the real engine's counts) and its acceptance at every position (n-gram:
vLLM's lookup replayed over the ids; a model drafter: estimated from the tokens each of the real
cell's steps emitted, loadgen.whatif.fromrun), on the engine that replays traces
(servers/emulator/replay.py) under the variant's drafter, k and k-by-batch-size rule. Only what
costs time is the model's; the work is the real cell's."""

from __future__ import annotations

import time
from pathlib import Path

from loadgen.config import clock, run_config
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from loadgen.planning.plan import Cell, Plan
from loadgen.results.outcome import RunOutcome
from loadgen.simulate.job import engine_figures
from loadgen.simulate.virtual import SimSpec, simulate
from loadgen.sweep.cell import load_shape, speculative
from loadgen.sweep.predicted import predicted
from servers.emulator.__main__ import engine_from_command


def simulate_cell(plan: Plan, cell: Cell, workload, argv) -> RunOutcome:
    """One cell: the plan's requests for it (its measured count or duration, the sweep's seed) on
    an engine built from the variant's emulator command line `argv` (ValueError naming a bad
    flag). The warm-up a real cell sends first is left out: a simulated engine has nothing to
    warm, and the figures are the measured requests' either way."""
    engine, served = engine_from_command(argv)
    submit, prediction = None, None
    if plan.replay is not None:
        engine, submit, workload = replayed(plan, cell, engine, workload)
    elif plan.traces_from:
        engine, submit, workload, prediction = predicted(plan, cell, engine, workload)
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
    result = simulate(sim, workload.requests(None, plan.seed), engine=engine, submit=submit)
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
        **speculative(plan, cell),
        **({"prediction": prediction} if prediction is not None else {}),
    )
    engine_side = engine_figures(result, time.monotonic() - wall)
    summary = summarize(
        frame, ([], []), config=config, load_info=result.run.load_info, goodput=plan.goodput, server_figures=engine_side
    )
    summary.update(engine_side)
    return RunOutcome(frame, summary, result.run)


class _Served:
    """The real cell's measured requests, in the order the workload gives them: what a replayed
    virtual cell sends (its requests() takes the same arguments as a workload's)."""

    def __init__(self, workload, traces: dict) -> None:
        self.workload, self.traces = workload, traces

    def requests(self, limit, seed):
        return (r for r in self.workload.requests(limit, seed) if r.id in self.traces)

    def describe(self):
        return self.workload.describe()


def replayed(plan: Plan, cell: Cell, engine, workload):
    """(engine, submit, requests) serving the real cell's requests as it served them;
    ValueError (one line) when the real sweep has no such cell or kept no token ids."""
    from loadgen.results.cells import cell_dir
    from loadgen.whatif.acceptance_traces import TraceError
    from loadgen.whatif.fromrun import MODEL_DRAFTERS, from_results

    spec = engine.spec
    where = cell_dir(Path(plan.replay), cell)  # type: ignore[arg-type]  # set with replay
    model = spec is not None and spec.method in MODEL_DRAFTERS
    lookup = (spec.prompt_lookup_min, spec.prompt_lookup_max) if spec is not None and spec.method == "ngram" else (5, 5)
    if spec is not None and spec.method != "ngram" and not model:
        raise ValueError(
            f"--replay: {spec.method} acceptance cannot be replayed from a run's token ids "
            "(n-gram and model drafters can)"
        )
    try:
        traces, _ = from_results(where, drafter=(spec.method, spec.k) if model else None, ngram_lookup=lookup)
    except TraceError as e:
        raise ValueError(f"--replay: cell {cell.key}: {e}") from None
    return served_traces(engine, {t.id: t for t in traces}, workload)


def served_traces(engine, by_id: dict, workload):
    """(engine, submit, requests): the requests of `workload` that `by_id` (request id -> trace)
    holds, each served with its traced prompt and output token ids and, under a drafter, its
    traced acceptance, on the engine that replays traces with `engine`'s profile, drafter, k and
    k-by-batch-size rule."""
    from servers.emulator.replay import Live, ReplayEngine

    spec = engine.spec
    kb = tuple(engine._k_by_batch) if getattr(engine, "_k_by_batch", None) else None
    live = Live(spec.method, spec.k, kb) if spec is not None else None
    eng = ReplayEngine(engine.profile, engine.cfg, live=live)

    def submit(e, req, t_send: float, sink) -> None:
        t = by_id[req.id]
        if live is None:
            plan_ = [("", 0, 1)] * (len(t.generated_token_ids) - 1)
            e.submit_plan(req.id, t.prompt_token_ids, t.generated_token_ids, plan_, arrival=t_send, sink=sink)
            return
        acc = t.drafters[spec.method]
        offered = acc.proposed if spec.method == "ngram" else None
        e.submit_live(
            req.id, t.prompt_token_ids, t.generated_token_ids, acc.acc_len, offered=offered, arrival=t_send, sink=sink
        )

    return eng, submit, _Served(workload, by_id)
