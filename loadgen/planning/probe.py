"""`loadgen sweep --time-scale auto`: how much slower than its model this machine must run the
emulated GPU at each load level, so that neither the emulator nor the client falls behind.

The probe starts the emulator for the plan's baseline (without speculation an engine takes the
most steps per emulated second, and the client reads one chunk per token) and for its n-gram
variant, if it has one (the prompt lookup makes its steps the emulator's most expensive). For
each, from the highest load level down, it runs a closed loop (or the open-loop rate) of the
plan's first workload's prompts, with 32-token answers so that a wave of requests ends (and the
next is sent at once) inside the window, for a short window once every request sent has its
first token, reading the emulator's own CPU time, modeled seconds
and steps from its /metrics, the client's CPU time, and the client's event-loop lag (its
self-check). That gives, independent of the scale the window ran at:

- W: CPU seconds each process needs per emulated second. At scale S it is busy W / S of the
  time; at most BUSY, or queues build;
- w: CPU seconds each needs per engine step: a step's chunks are written (emulator) or read
  (client) up to w / S late in emulated time; at most STEP_S;
- the client's loop lag p99 (bursts, and the machine's own stalls) and send lateness p99 (a
  wave of requests ending at once is sent one after another): what the self-check flags at its
  bounds; at most LAG_S and LATE_S once divided by S.

A level's scale is the smallest on the LADDER that keeps all of them, for every variant probed,
and at least the scale of the level below (load only grows). A level probed at a scale smaller
than it turns out to need is measured again at that scale (lag grows faster than in proportion
near a process's limit). Once a level needs at most half of
real time, the levels below it run in real time without being probed. Everything measured and
chosen is kept in the sweep's manifest (time_scale_probe).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import numpy as np

from loadgen.load import timescale
from loadgen.load.execute import LoadShape, RunSpec, execute, session_for
from loadgen.planning.plan import Cell, Plan
from servers import engines
from servers.deployments import Deployment, render
from servers.launcher import LaunchError, Server, free_port

LADDER = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0)
BUSY = 0.5  # the largest share of its time either process may be busy
STEP_S = 0.002  # the largest per-step work, in emulated seconds (chunks written or read that late)
LAG_S = 0.0025  # the client's loop lag p99, emulated (the self-check's bound over chunks is 4 ms)
LATE_S = 0.005  # the client's send lateness p99, emulated: the self-check's bound itself, as the
# probe's short answers end in waves more often, and more together, than a cell's
ANSWER = 32  # tokens per probe request: a wave of requests ends, and the next is sent at once,
# inside every window (with the sweep's fixed-length answers they end together)
WINDOW_S = 0.3  # emulated seconds each level is measured over, once every request sent has its
# first token (the prompts are in; what follows is the cell's steady state)
RAMP_MAX_S = 30.0  # real seconds a level may take to get there
TRIAL = 2.0  # the scale the highest level is probed at; a level below, at the scale above it
ENOUGH = 0.5  # a level needing at most this much: the levels below it are not probed


class ProbeError(RuntimeError):
    pass


@dataclass
class LevelCost:
    level: float
    probed_at: float  # the scale the window ran at
    steps: float
    modeled_s: float
    emulator_cpu_s: float
    client_cpu_s: float
    client_lag_p99_s: float = 0.0  # real seconds
    client_late_p99_s: float = 0.0  # real seconds: send lateness of the requests sent in the window
    variant: str = ""
    needed: float | None = None  # when the level was measured twice: what it was found to need
    chosen: float = 1.0
    why: str = ""

    def per_emulated_s(self, cpu: float) -> float:
        return cpu / self.modeled_s if self.modeled_s > 0 else math.inf

    def per_step(self, cpu: float) -> float:
        return cpu / self.steps if self.steps > 0 else math.inf

    def needs(self, busy: float = BUSY) -> tuple[float, str]:
        """The smallest scale each limit allows (or what a second measurement found), and the
        limit that decides."""
        limits = {
            "emulator busy": self.per_emulated_s(self.emulator_cpu_s) / busy,
            "client busy": self.per_emulated_s(self.client_cpu_s) / busy,
            "emulator work per step": self.per_step(self.emulator_cpu_s) / STEP_S,
            "client loop lag": self.client_lag_p99_s / LAG_S,
            "client send lateness": self.client_late_p99_s / LATE_S,
        }
        which = max(limits, key=lambda k: limits[k])
        return max(limits[which], self.needed or 0.0), which

    def explain(self) -> str:
        return (
            f"{self.variant + ' ' if self.variant else ''}{self.per_emulated_s(self.emulator_cpu_s):.2f} / "
            f"{self.per_emulated_s(self.client_cpu_s):.2f} CPU s per emulated s (emulator / client), "
            f"{1e3 * self.per_step(self.emulator_cpu_s):.2f} / {1e3 * self.per_step(self.client_cpu_s):.2f} ms "
            f"per step; client loop lag and send lateness p99 {1e3 * self.client_lag_p99_s:.1f} and "
            f"{1e3 * self.client_late_p99_s:.1f} ms (real, at {self.probed_at:g}x)"
        )


def on_ladder(x: float) -> float:
    return next((s for s in LADDER if s >= x - 1e-9), LADDER[-1])


def choose(
    costs: list[LevelCost], busy: float = BUSY, mode: str = "closed", levels: list[float] | None = None
) -> dict[str, float]:
    """Per level label (every one of `levels`, default those probed), the scale; sets each
    cost's `chosen` and `why` (the variant and limit that decided)."""
    worst: dict[float, LevelCost] = {}
    for c in costs:
        if c.level not in worst or c.needs(busy)[0] > worst[c.level].needs(busy)[0]:
            worst[c.level] = c
    out, floor = {}, 1.0
    for level in sorted(set(levels or []) | set(worst)):
        found = worst.get(level)
        if found is not None:
            c = found
            need, which = c.needs(busy)
            floor = max(floor, on_ladder(max(1.0, need)))
            for same in (x for x in costs if x.level == level):
                same.chosen = floor
            c.why = f"{which}: {c.explain()}"
        out[Cell("", "", level, mode).level_label] = floor
    return out


async def _counters(session, url: str, headers: dict) -> tuple[float, float, float]:
    """The emulator's CPU seconds, modeled seconds and steps (GET /emulator/clock: a few bytes
    of JSON, where rendering /metrics would cost the emulator a millisecond or two)."""
    try:
        async with session.get(url, headers=headers) as resp:
            c = await resp.json()
        return float(c["cpu_seconds"]), float(c["modeled_seconds"]), float(c["steps"])
    except (aiohttp.ClientError, ValueError, KeyError, TypeError) as e:
        raise ProbeError(f"the emulator at {url} did not answer ({e})") from None


async def _level(
    session, api_base: str, model: str, workload, level: float, mode: str, scale: float, seed: int, headers: dict
) -> LevelCost:
    await timescale.set_server_scale(session, api_base, scale, headers)
    clock = timescale.control_url(api_base)
    load = LoadShape(concurrency=int(level)) if mode == "closed" else LoadShape(rate=level)
    spec = RunSpec(
        api_base=api_base,
        model=model,
        load=load,
        num_requests=None,
        duration_s=3600.0,
        seed=seed,
        headers=headers,
        time_scale=scale,
    )
    stop = asyncio.Event()
    started: list = []
    requests = (dataclasses.replace(r, max_tokens=ANSWER, ignore_eos=True) for r in workload.requests(None, seed))
    run = asyncio.ensure_future(execute(spec, requests, stop=stop, on_start=started.append))
    try:
        if mode == "closed":  # until every user's first request has its first token
            deadline = time.monotonic() + RAMP_MAX_S
            await asyncio.sleep(0.05 + level * 0.001 * scale)
            while (
                not run.done()
                and time.monotonic() < deadline
                and not (started and all(len(r.chunk_t_ns) or r.error_type for r in started))
            ):
                await asyncio.sleep(0.02)
        else:  # arrivals go on: long enough for a few of them to be served
            await asyncio.sleep(min(RAMP_MAX_S, max(0.5, 5.0 / level) * scale))
        if not any(len(r.chunk_t_ns) for r in started):
            failed = next((r.error_message for r in started if r.error_message), "no response")
            raise ProbeError(f"the probe's requests got no tokens ({failed})")
        cpu0, modeled0, steps0 = await _counters(session, clock, headers)
        client0, t0 = time.process_time(), time.monotonic_ns()
        await asyncio.sleep(WINDOW_S * scale)
        cpu1, modeled1, steps1 = await _counters(session, clock, headers)
        client1, t1 = time.process_time(), time.monotonic_ns()
    finally:
        stop.set()
        done = await asyncio.gather(run, return_exceptions=True)
    if isinstance(done[0], BaseException):
        raise ProbeError(f"the probe's load failed: {done[0]}")
    result = done[0]
    if steps1 <= steps0:
        raise ProbeError(f"the emulator ran no step in a {WINDOW_S * scale:g} s window at load {level:g}")
    at, lag = np.asarray(result.loop_lag_at_ns), np.asarray(result.loop_lag_ns)
    inside = lag[(at >= t0) & (at <= t1)]
    late = [r.lateness_ns for r in result.records if t0 <= r.t_scheduled_ns <= t1 and r.t_send_ns]
    return LevelCost(
        level,
        scale,
        steps1 - steps0,
        modeled1 - modeled0,
        cpu1 - cpu0,
        client1 - client0,
        float(np.percentile(inside, 99)) / 1e9 if inside.size else 0.0,
        float(np.percentile(late, 99)) / 1e9 if late else 0.0,
    )


async def _probe_levels(
    url: str, model: str, workload, levels: list[float], mode: str, seed: int, headers: dict, variant: str, busy: float
) -> list[LevelCost]:
    costs: list[LevelCost] = []
    scale = TRIAL
    async with session_for(LoadShape(concurrency=1)) as session:
        for level in sorted(levels, reverse=True):
            cost = await _level(session, url + "/v1", model, workload, level, mode, scale, seed, headers)
            need = cost.needs(busy)[0]
            if need > scale:  # probed too fast to trust (a process near its limit lags more than
                failed, scale = scale, on_ladder(need)  # in proportion): again where it should hold
                cost = await _level(session, url + "/v1", model, workload, level, mode, scale, seed, headers)
                need = max(on_ladder(failed * 1.01), cost.needs(busy)[0])  # more than where it failed
            cost.variant, cost.needed = variant, need
            costs.append(cost)
            if need <= ENOUGH:
                break
            scale = max(1.0, on_ladder(need))
    return costs


def probe_variants(plan: Plan, dep: Deployment) -> list[str]:
    """The baseline (or the first variant) and, if the plan has one, its first n-gram variant."""
    first = plan.baseline if plan.baseline in plan.variants else plan.variants[0]
    method = engines.get(dep.engine).method
    ngram = next((v for v in plan.variants if method(dep.variants[v]) == "ngram" and v != first), None)
    return [first] + ([ngram] if ngram else [])


def run_probe(
    plan: Plan, dep: Deployment, workload, log_dir: Path, slots: int = 1, api_key: str | None = None
) -> tuple[dict[str, float], dict]:
    """The scale per level (label -> scale) and the record of how it was chosen. With `slots`
    servers side by side (--parallel), each process may use a share of the CPUs that much
    smaller."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    busy = BUSY / max(1, slots)
    t0 = time.monotonic()
    costs: list[LevelCost] = []
    for variant in probe_variants(plan, dep):
        launch = render(
            dep,
            variant,
            port=free_port(),
            gpus=tuple(plan.gpus[: dep.tensor_parallel_size]),
            executable=plan.executable,
        )
        try:
            with Server(launch, log_dir / "time-scale-probe.log", api_key) as srv:
                costs += asyncio.run(
                    _probe_levels(
                        srv.launch.url,
                        launch.served_model_name,
                        workload,
                        list(plan.levels),
                        plan.mode,
                        plan.seed,
                        headers,
                        variant,
                        busy,
                    )
                )
        except (LaunchError, timescale.TimeScaleError) as e:
            raise ProbeError(str(e)) from None
    chosen = choose(costs, busy, plan.mode, list(plan.levels))
    record = {
        "variants": probe_variants(plan, dep),
        "workload": plan.workload_labels[0],
        "busy_limit": busy,
        "step_limit_s": STEP_S,
        "lag_limit_s": LAG_S,
        "window_emulated_s": WINDOW_S,
        "wall_s": time.monotonic() - t0,
        "levels": [asdict(c) for c in costs],
        "chosen": chosen,
    }
    return chosen, record


def decided(record: dict) -> str:
    """What decided the highest level's scale, in words."""
    top = max(record["levels"], key=lambda c: (c["level"], c["why"] != ""))
    return f"at load {top['level']:g}: {top['why']}"


def describe(chosen: dict[str, float]) -> str:
    """`c1-c8 1x, c16 1.5x, c32 2x, c64 3x`: runs of levels at one scale."""
    groups: list[tuple[list[str], float]] = []
    for label, s in chosen.items():
        if groups and groups[-1][1] == s:
            groups[-1][0].append(label)
        else:
            groups.append(([label], s))
    return ", ".join((names[0] if len(names) == 1 else f"{names[0]}-{names[-1]}") + f" {s:g}x" for names, s in groups)
