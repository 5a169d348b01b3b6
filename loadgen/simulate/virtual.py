"""The simulator: the emulated engine (servers/emulator) under a load, in virtual time.

No HTTP and no sleeping: the clock jumps from one engine step's end to the next, so thousands
of requests take seconds. Requests arrive as in a real run (closed loop: N users, each sending
its next request when its last one ends, joining 1 ms apart; open loop: the same seeded
arrival schedule as `loadgen run`, optionally capped in flight; a conversation's turns one
after another, each with the reply to the last as the emulator streams it, the think time
after it, drawn as `loadgen run` draws it), and each becomes the same
`RequestRecord` a real run writes, chunk by chunk with exact usage. The client sends on time and
reads each chunk the moment its step ends; what it cannot do is answer in no time: a request
that follows a response (a closed-loop user's next one, an open-loop one waiting for a slot)
reaches the engine `client_rtt_s` after that response ended, as in a real run, where it
misses the step that starts right then (the engine plans its next step at once).

`time_scale` runs the simulated GPU S times slower on the records' clock (the same mapping as
the real-time emulator's, servers/emulator/timeline.py); `loadgen.load.timescale.to_emulated`
converts the result back, which is how the invariance of every figure under S is pinned.

What is sent when is the shape's schedule (`join_s`, `arrivals_s`) and the executors' own rules,
held in the same objects a real run uses: a closed-loop user deals its requests through
loadgen.executors.closed_loop.User, an open loop's cap hands slots on through
loadgen.executors.open_loop.Slots, a conversation's later turns come from
loadgen.executors.conversation.Conversation. A new load shape needs nothing here.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from loadgen.client import phases
from loadgen.client.record import RequestRecord
from loadgen.executors import closed_loop
from loadgen.executors.closed_loop import User
from loadgen.executors.conversation import Conversation, Think
from loadgen.executors.open_loop import Slots
from loadgen.load.execute import RunResult
from loadgen.shapes import Shape
from loadgen.simulate import CLIENT_RTT_S
from servers.emulator import chat as chatting
from servers.emulator import profile as profiles
from servers.emulator.content import chat_prompt
from servers.emulator.engine import Engine, EngineConfig, EngineError
from servers.emulator.spec import SpecConfig
from servers.emulator.timeline import Timeline
from workloads import Request

_T0_NS = 1_000_000_000  # virtual time 0, in ns (records need positive times)
_REFUSAL_S = 0.001  # a refused request still costs its user a round trip


@dataclass
class SimSpec:
    profile: str
    spec: SpecConfig | None
    load: Shape
    engine: EngineConfig = field(default_factory=EngineConfig)
    num_requests: int | None = 200
    duration_s: float | None = None
    warmup: int = 0
    seed: int = 0
    endpoint: str = "completions"
    join_gap_s: float = closed_loop.JOIN_GAP_S  # as loadgen run's users join (emulated seconds)
    client_rtt_s: float = CLIENT_RTT_S  # emulated seconds
    time_scale: float = 1.0  # the records' clock runs this many times slower than the model
    think: Think = field(default_factory=Think)  # between a conversation's turns (emulated seconds)
    # merged into every request's body, as `run --extra-body`: what the engine reads of it is
    # a reasoning model's thinking switch and budget (servers/emulator/chat.py)
    extra_body: dict = field(default_factory=dict)


@dataclass
class SimResult:
    run: RunResult
    engine: Engine
    makespan_s: float


@dataclass(frozen=True)
class _Turn:
    """A conversation's next turn, due at its event's time (its user or open-loop slot held)."""

    item: tuple[int, Request]
    user: int | None
    turns: Conversation


def _at(line: Timeline):
    """Modeled seconds -> the records' nanoseconds (the simulated real clock, at line's scale)."""
    return lambda t: _T0_NS + int(round(line.real(t) * 1e9))


Submit = Callable[[Engine, Request, float, object], None]


def _counted(engine: Engine, req: Request, body: dict, chat: bool) -> int | None:
    """The prompt's tokens by the model's own tokenizer where the engine has one (serve
    --tokenizer), as the server counts a request of this endpoint; None: the emulator's words."""
    if engine.tokens is None:
        return None
    if chat or req.prompt is None:
        return engine.tokens.count(messages=req.as_messages(), tools=body.get("tools"))
    return engine.tokens.count(prompt=req.prompt)


def simulate(
    sim: SimSpec, requests: Iterator[Request], *, engine: Engine | None = None, submit: Submit | None = None
) -> SimResult:
    """`engine`: one to drive instead of a new serving engine (e.g. a ReplayEngine);
    `submit(engine, request, t_send, sink)` hands it a request (default: the request's text,
    as the server would get it)."""
    if engine is None:
        engine = Engine(profiles.load(sim.profile), sim.spec, sim.engine)
    _ns = _at(Timeline(sim.time_scale))
    rtt = sim.client_rtt_s
    load = sim.load
    limit = None if sim.num_requests is None else sim.num_requests + sim.warmup
    deadline = sim.duration_s
    source = iter(requests)
    records: list[RequestRecord] = []
    count = 0  # requests taken from the workload
    order = itertools.count()
    events: list[tuple[float, int, Any]] = []  # (time, tie-break, user, None or a capped request)
    if load.closed:  # the shape's schedule, as loadgen run's executors take it
        for user, t in enumerate(load.join_s(sim.join_gap_s)):
            heapq.heappush(events, (t, next(order), user))
    else:
        for t in load.arrivals_s(num=limit, duration_s=deadline, seed=sim.seed).tolist():
            heapq.heappush(events, (t, next(order), None))
    slots: Slots[tuple[float, tuple[int, Request]]] = Slots(load.max_concurrency or None)  # open loop's cap
    users: dict[int, User[tuple[int, Request]]] = {}  # each closed-loop user's requests, as loadgen run deals them
    firsts: dict[int, int] = {}  # each closed-loop user's first send (ns)

    def send(
        item: tuple[int, Request], t_sched: float, t_send: float, user: int | None, turns: Conversation | None = None
    ) -> None:
        index, req = item
        rec = RequestRecord(
            index=index,
            request_id=req.id,
            warmup=index < sim.warmup,
            t_scheduled_ns=_ns(t_sched),
            workload=req.workload,
            category=req.category,
            max_tokens=req.max_tokens,
            queue_delay_ns=_ns(t_send) - _ns(t_sched),
            session=req.session,
            turn=req.turn,
        )
        rec.t_call_ns = rec.t_send_ns = _ns(t_send)
        records.append(rec)
        if req.followups and turns is None:
            turns = Conversation(sim.think, sim.seed, index)  # its later turns, as loadgen run sends them
        try:
            (submit or _submit_text)(engine, req, t_send, (rec, user, item, turns))
        except (EngineError, chatting.ChatError) as e:  # the server's 400, in its words
            rec.status, rec.error_type, rec.error_message = 400, "http_400", f"HTTP 400: {e}"
            rec.t_end_ns = _ns(t_send + _REFUSAL_S)
            free(t_send + _REFUSAL_S, user)  # its conversation (if any) ends here, its slot or user free

    def free(t_free: float, user: int | None) -> None:
        """A request (or a conversation) is over: its user goes on, or its open-loop slot goes to
        the longest waiting request, from `t_free`."""
        if user is not None:
            heapq.heappush(events, (t_free, next(order), user))
            return
        waiting = slots.free()
        if waiting is not None:
            heapq.heappush(events, (t_free, next(order), waiting))

    def _submit_text(engine: Engine, req: Request, t_send: float, sink) -> None:
        chat = sim.endpoint == "chat"
        body = {**req.sampling, **sim.extra_body}
        if chat:  # what the server reads of a chat request (servers/emulator/api.py)
            body.update(messages=req.as_messages(), **({"tools": [dict(t) for t in req.tools]} if req.tools else {}))
        text = (
            chatting.tools_text(body) + chat_prompt(req.as_messages())
            if chat
            else (req.prompt if req.prompt is not None else chat_prompt(req.as_messages()))
        )
        think = chat and chatting.thinks(body, engine.cfg.reasoning)
        engine.submit(
            req.id,
            text,
            req.max_tokens,
            arrival=t_send,
            ignore_eos=req.ignore_eos,
            min_tokens=req.min_tokens,
            sink=sink,
            think=think,
            thinking_budget=chatting.thinking_budget(body) if think else None,
            tool=chatting.tool_choice(body, engine.cfg.tool_calls) if chat else None,
            prompt_tokens=_counted(engine, req, body, chat),
        )

    def take() -> tuple[int, Request] | None:
        """The next request, numbered as the run's feed numbers it (loadgen.executors.feed)."""
        nonlocal count
        if limit is not None and count >= limit:
            return None
        req = next(source, None)
        if req is None:
            return None
        count += 1
        return count - 1, req

    t = 0.0
    while True:
        while events and events[0][0] <= t:
            t_event, _, user = heapq.heappop(events)
            if isinstance(user, _Turn):  # due: the think time after the reply has passed
                send(user.item, t_event, t_event, user.user, user.turns)
                continue
            if isinstance(user, tuple):  # a capped open-loop request: the slot it was handed
                send(user[1], user[0], t_event, None)
                continue
            if deadline is not None and t_event >= deadline:
                continue
            if user is not None:  # closed loop: the user is free now (loadgen.executors.closed_loop.User)
                own = users.setdefault(user, User(take))
                item = own.next()
                if item is None:
                    continue
                if user not in firsts:
                    firsts[user] = _ns(t_event)
                send(item, t_event, t_event, user)
                own.sent()
                continue
            item = take()
            if item is None:
                continue
            if slots.take((t_event, item)):
                send(item, t_event, t_event, None)
        if not engine.has_work:
            if not events:
                break
            t = events[0][0]
            continue
        step = engine.plan(t)
        if step is None:
            raise RuntimeError("engine has work but could not schedule any of it")
        t_end = t + step.duration
        for em in engine.commit(step, t_end):
            rec, user, (index, req), turns = cast(tuple, em.seq.sink)
            seq = em.seq
            phase = None
            if seq.reasoning_end or seq.tool_call is not None:  # as the server streams it
                d, phase = chatting.delta(seq, em.start, em.words, em.tokens)
                if not d and not em.finished:
                    continue  # markers only: the server sends no chunk
            rec.chunk_t_ns.append(_ns(t_end))
            rec.chunk_usage.append(em.seq.emitted)
            rec.chunk_chars.append(-1)
            if seq.reasoning_end or seq.tool_call is not None or rec.chunk_phase is not None:
                # the reasoning count a server gives only with a reasoning parser
                phases.note(rec, phase, seq.reasoning_tokens if engine.cfg.reasoning else None)
            rec.usage_completion_tokens = em.seq.emitted
            if rec.prompt_tokens is None:
                rec.prompt_tokens = len(em.seq.prompt)
            if em.finished:
                rec.done = True
                rec.finish_reason = em.seq.finish_reason
                rec.t_end_ns = _ns(t_end)
                if seq.sd is not None:  # vLLM's per-request counts, as the last chunk carries them
                    sd = seq.sd.to_dict()
                    rec.server_draft_tokens = sd["num_draft_tokens"]
                    rec.server_accepted_tokens = sd["num_accepted_draft_tokens"]
                    rec.server_spec_steps = sd["num_spec_steps"]
                if req.followups:  # the next turn: the history with this reply, as streamed
                    calls = None
                    if seq.reasoning_end or seq.tool_call is not None:  # as the client takes them apart
                        msg = chatting.message(seq)
                        reply = msg.get("content") or ""
                        calls = [{"id": c["id"], **c["function"]} for c in msg.get("tool_calls") or ()] or None
                    else:
                        reply = "".join(" " + w for w in em.seq.words[: em.seq.emitted])
                    pause, nxt = turns.next(req, reply, calls)
                    t_due = t_end + pause + rtt
                    if deadline is None or t_due < deadline:
                        heapq.heappush(events, (t_due, next(order), _Turn((index, nxt), user, turns)))
                        continue
                free(t_end + rtt, user)  # one round trip later
        t = t_end
    records.sort(key=lambda r: r.index)
    first = sorted(firsts.values())
    info = (
        {
            "ramp_s": (first[-1] - first[0]) / 1e9 if len(first) > 1 else None,
            "first_sends_ns": [first[0], first[-1]] if first else None,
        }
        if load.closed
        else {}
    )
    run = RunResult(records, [], [], _T0_NS, 0.0, False, info)
    return SimResult(run, engine, t)
