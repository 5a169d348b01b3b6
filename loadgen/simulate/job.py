"""`loadgen simulate` as a job: the emulated engine under a load in virtual time
(loadgen.simulate.virtual), with the same request frame and summary as a measured run, plus the
engine's own counts; optionally every finished request's exact acceptance trace."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pandas as pd

from loadgen import config as configs
from loadgen.errors import LoadgenError
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from loadgen.options import SimOptions
from loadgen.simulate import CLIENT_RTT_S
from loadgen.simulate.virtual import SimResult, SimSpec, simulate
from workloads import Workload


@dataclass
class SimJob:
    sim: SimSpec
    workload: Workload
    model: str | None = None  # the model name to record [default: the profile's first]
    spec_json: str | None = None  # the --speculative-config as given, for the record
    traces: IO | None = None  # an open file for the acceptance traces (JSON lines)
    objectives: dict | None = None  # goodput objectives
    config: dict = field(default_factory=dict)  # more config keys (the command line, the host)
    steady_state: bool = False  # figures over the steady state only (loadgen.measures.summary)


@dataclass
class Simulated:
    frame: pd.DataFrame
    result: SimResult
    job: SimJob
    wall_s: float

    def summary(self) -> dict:
        job, result, sim = self.job, self.result, self.job.sim
        engine = result.engine
        cfg = configs.run_config(
            "simulate",
            base_url=f"simulated:{sim.profile}",
            model=job.model or engine.profile.models[0],
            endpoint=sim.endpoint,
            load=configs.described_load(sim.load, sim.think),
            num_requests=sim.num_requests,
            duration_s=sim.duration_s,
            warmup=sim.warmup,
            seed=sim.seed,
            workload=job.workload.describe(),
            clock=configs.clock(result.run.t0_ns, None, "virtual"),
            simulated=True,
            profile=sim.profile,
            extra_body=sim.extra_body or None,
            speculative_config=job.spec_json,
            client_rtt_ms=sim.client_rtt_s * 1e3,
            engine={
                "max_num_seqs": sim.engine.max_num_seqs,
                "max_num_batched_tokens": sim.engine.max_num_batched_tokens,
                "kv_cache_tokens": engine.kv_capacity,
                "enable_prefix_caching": sim.engine.enable_prefix_caching,
                "reasoning": sim.engine.reasoning,
                "tool_calls": sim.engine.tool_calls,
            },
            **job.config,
        )
        engine_side = engine_figures(result, self.wall_s)
        s = summarize(
            self.frame,
            ([], []),
            config=cfg,
            goodput=job.objectives,
            load_info=result.run.load_info,
            steady=job.steady_state,
            server_figures=engine_side,  # the client's acceptance reconciled with the engine's counts
        )
        s.update(engine_side)
        return s


def engine_figures(result: SimResult, wall_s: float) -> dict:
    """A simulation's server-side figures, as a summary holds them: the engine's own counts over
    the whole run (spec_decode, server) and how long it took (simulation)."""
    engine, span = result.engine, result.makespan_s
    stats = engine.stats
    return {
        "spec_decode": stats.spec_summary() if engine.spec or getattr(engine, "live", None) else None,
        "server": {
            "window_s": span,
            "preemptions": stats.preemptions,
            "steps": stats.steps,
            "generation_tokens": stats.generation_tokens,
            "prompt_tokens": stats.prompt_tokens,
            "prefix_cache_hit_rate": (stats.prefix_hits / stats.prefix_queries if stats.prefix_queries else None),
            "generation_tok_s": stats.generation_tokens / span if span > 0 else None,
            "restarted": False,
        },
        "simulation": {"virtual_s": span, "wall_s": wall_s},
    }


def run_simulation(job: SimJob) -> Simulated:
    from servers.emulator import profile as profiles
    from servers.emulator.engine import Engine, EngineError

    sim = job.sim
    try:
        prof = profiles.load(sim.profile)
    except profiles.ProfileError as e:
        raise LoadgenError(str(e)) from None
    traces: list[dict] = []
    wall = time.monotonic()
    try:
        engine = Engine(prof, sim.spec, sim.engine, trace_sink=traces.append if job.traces is not None else None)
        result = simulate(sim, job.workload.requests(None, sim.seed), engine=engine)
    except EngineError as e:
        raise LoadgenError(str(e)) from None
    if job.traces is not None:  # in the workload's order (as sent), not as they finished
        sent = {r.request_id: r.index for r in result.run.records}
        traces.sort(key=lambda t: sent.get(t["id"], len(sent)))
        with job.traces:
            job.traces.writelines(json.dumps(t, separators=(",", ":")) + "\n" for t in traces)
    wall = time.monotonic() - wall
    return Simulated(request_frame(result.run.records), result, job, wall)


def _profile(o: SimOptions, note, config: dict) -> tuple[str, dict]:
    """The profile simulated (--profile, or the one serving --model), held to this machine: one
    fitted elsewhere refused unless --profile-anyway, then said first and kept in the config."""
    from loadgen.planning.profiles import held
    from servers.emulator import profile as profiles

    name = o.profile or (profiles.for_model(o.model) if o.model else None)
    if name is None:
        raise LoadgenError("give --profile (one of " + ", ".join(profiles.available()) + ") or a --model it serves")
    mismatch = held(name, o.profile_anyway)
    if mismatch:
        note(f"PROFILE MISMATCH (--profile-anyway): {mismatch}")
        config["profile_mismatch"] = mismatch
    return name, config


def sim_job(o: SimOptions, note=lambda _: None, config: dict | None = None) -> SimJob:
    """`loadgen simulate`'s options as a SimJob (every option checked, in one line each; the
    --acceptance-traces file opened first, so a bad path costs nothing)."""
    from loadgen.options import extra_body
    from loadgen.planning.profiles import prompt_texts, said_of
    from loadgen.run.options import load_shape, objectives, think, workload
    from servers.emulator import chat
    from servers.emulator import profile as profiles
    from servers.emulator.engine import EngineConfig
    from servers.emulator.spec import SpecError, parse

    name, config = _profile(o, note, dict(config or {}))
    load, num = load_shape(o)
    wl = workload(o, note=note, load=load)
    goals = objectives(o.goodput_specs)
    for key, given in (
        ("max_num_seqs", o.max_num_seqs),
        ("max_num_batched_tokens", o.max_num_batched_tokens),
        ("kv_cache_tokens", o.kv_cache_tokens),
    ):
        if given is not None and given < 1:
            raise LoadgenError(f"--{key.replace('_', '-')} must be >= 1, got {given}")
    try:
        profiles.load(name)
        spec = parse(o.spec_json)
    except (profiles.ProfileError, SpecError) as e:
        raise LoadgenError(str(e)) from None
    for said in said_of(name, spec.method if spec else None, prompt_texts(wl, o.seed)):
        note(f"note: {said}")
    try:
        chat.check_parsers(o.reasoning_parser, o.tool_call_parser, False)
    except chat.ChatError as e:
        raise LoadgenError(str(e)) from None
    if o.reasoning_parser is not None and o.endpoint != "chat":
        note("--reasoning-parser: a parser works on the chat endpoint only; with --endpoint completions nothing thinks")
    extra = extra_body(o.extra_body) or {}
    try:
        chat.thinking_budget(extra)
    except chat.ChatError as e:
        raise LoadgenError(f"--extra-body: {e}") from None
    sim = SimSpec(
        name,
        spec,
        load,
        num_requests=num,
        duration_s=o.duration,
        warmup=o.warmup,
        seed=o.seed,
        endpoint=o.endpoint,
        client_rtt_s=CLIENT_RTT_S if o.client_rtt_ms is None else o.client_rtt_ms / 1e3,
        think=think(o, wl),
        extra_body=extra,
        engine=EngineConfig(
            max_num_seqs=o.max_num_seqs,
            max_num_batched_tokens=o.max_num_batched_tokens,
            kv_capacity_tokens=o.kv_cache_tokens,
            seed=o.seed,
            enable_prefix_caching=o.prefix_caching,
            reasoning=o.reasoning_parser is not None,
            tool_calls=o.tool_call_parser is not None,
        ),
    )
    traces = None
    if o.traces_path:
        try:
            Path(o.traces_path).parent.mkdir(parents=True, exist_ok=True)
            traces = open(o.traces_path, "w")
        except OSError as e:
            raise LoadgenError(f"cannot write --acceptance-traces {o.traces_path!r}: {e.strerror or e}") from None
    return SimJob(
        sim,
        wl,
        model=o.model,
        spec_json=o.spec_json,
        traces=traces,
        objectives=goals,
        config=config,
        steady_state=o.steady_state,
    )
