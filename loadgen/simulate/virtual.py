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
loadgen.executors.closed_loop.Users, an open loop's cap hands slots on through
loadgen.executors.open_loop.Slots, a conversation's later turns come from
loadgen.executors.conversation.Conversation. A new load shape needs nothing here.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import cast

from loadgen.client import phases
from loadgen.client.record import RequestRecord
from loadgen.executors import closed_loop
from loadgen.executors.closed_loop import Users
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


# What the event heap holds, one dataclass per kind, each due at its entry's time.
@dataclass(frozen=True)
class _UserFree:
    """A closed-loop user is free (it joined, or its last request ended a round trip ago)."""

    user: int


@dataclass(frozen=True)
class _Arrival:
    """An open loop's request is due by the shape's schedule."""


@dataclass(frozen=True)
class _SlotFreed:
    """An open loop's capped request, scheduled at `t_sched`, got the slot just freed."""

    t_sched: float
    item: tuple[int, Request]


@dataclass(frozen=True)
class _Turn:
    """A conversation's next turn, due at its event's time (its user or open-loop slot held)."""

    item: tuple[int, Request]
    user: int | None
    turns: Conversation


_Event = _UserFree | _Arrival | _SlotFreed | _Turn


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
    client = _VirtualClient(sim, engine, iter(requests), submit)
    t = client.run()
    return SimResult(client.result(), engine, t)


class _VirtualClient:
    """The client and its load in virtual time: the event heap (what is due when), the
    requests it sends through the shape's and the executors' rules, and each engine step's
    emissions read as the chunks a real client would read."""

    def __init__(self, sim: SimSpec, engine: Engine, source: Iterator[Request], submit: Submit | None) -> None:
        self.sim, self.engine, self.source = sim, engine, source
        self.submit = submit or self._submit_text
        self.ns = _at(Timeline(sim.time_scale))
        self.limit = None if sim.num_requests is None else sim.num_requests + sim.warmup
        self.deadline = sim.duration_s
        self.records: list[RequestRecord] = []
        self.count = 0  # requests taken from the workload
        self.order = itertools.count()
        self.events: list[tuple[float, int, _Event]] = []  # (time, tie-break, what is due)
        self.slots: Slots[tuple[float, tuple[int, Request]]] = Slots(sim.load.max_concurrency or None)
        self.users: Users[tuple[int, Request]] | None = None  # the closed-loop users' requests
        self.firsts: dict[int, int] = {}  # each closed-loop user's first send (ns)
        load = sim.load
        if load.closed:  # the shape's schedule, as loadgen run's executors take it
            joins = load.join_s(sim.join_gap_s)
            self.users = Users(self.take, range(len(joins)))  # every first dealt before any second
            for user, t in enumerate(joins):
                self.push(t, _UserFree(user))
        else:
            for t in load.arrivals_s(num=self.limit, duration_s=self.deadline, seed=sim.seed).tolist():
                self.push(t, _Arrival())

    def push(self, t: float, event: _Event) -> None:
        heapq.heappush(self.events, (t, next(self.order), event))

    def run(self) -> float:
        """Every event and engine step until nothing is due and the engine is idle; the end."""
        t = 0.0
        engine = self.engine
        while True:
            while self.events and self.events[0][0] <= t:
                t_event, _, event = heapq.heappop(self.events)
                self.on_event(t_event, event)
            if not engine.has_work:
                if not self.events:
                    return t
                t = self.events[0][0]
                continue
            step = engine.plan(t)
            if step is None:
                raise RuntimeError("engine has work but could not schedule any of it")
            t_end = t + step.duration
            for em in engine.commit(step, t_end):
                self.on_emission(em, t_end)
            t = t_end

    def on_event(self, t_event: float, event: _Event) -> None:
        if isinstance(event, _Turn):  # due: the think time after the reply has passed
            self.send(event.item, t_event, t_event, event.user, event.turns)
        elif isinstance(event, _SlotFreed):  # a capped open-loop request: the slot it was handed
            self.send(event.item, event.t_sched, t_event, None)
        elif self.deadline is not None and t_event >= self.deadline:
            return
        elif isinstance(event, _UserFree):  # the user is free now (loadgen.executors.closed_loop.Users)
            assert self.users is not None
            item = self.users.next(event.user)
            if item is None:
                return
            self.firsts.setdefault(event.user, self.ns(t_event))
            self.send(item, t_event, t_event, event.user)
            self.users.sent(event.user)
        else:  # an open loop's arrival
            item = self.take()
            if item is not None and self.slots.take((t_event, item)):
                self.send(item, t_event, t_event, None)

    def take(self) -> tuple[int, Request] | None:
        """The next request, numbered as the run's feed numbers it (loadgen.executors.feed)."""
        if self.limit is not None and self.count >= self.limit:
            return None
        req = next(self.source, None)
        if req is None:
            return None
        self.count += 1
        return self.count - 1, req

    def send(
        self,
        item: tuple[int, Request],
        t_sched: float,
        t_send: float,
        user: int | None,
        turns: Conversation | None = None,
    ) -> None:
        index, req = item
        ns, sim = self.ns, self.sim
        rec = RequestRecord(
            index=index,
            request_id=req.id,
            warmup=index < sim.warmup,
            t_scheduled_ns=ns(t_sched),
            workload=req.workload,
            category=req.category,
            max_tokens=req.max_tokens,
            queue_delay_ns=ns(t_send) - ns(t_sched),
            session=req.session,
            turn=req.turn,
        )
        rec.t_call_ns = rec.t_send_ns = ns(t_send)
        self.records.append(rec)
        if req.followups and turns is None:
            turns = Conversation(sim.think, sim.seed, index)  # its later turns, as loadgen run sends them
        try:
            self.submit(self.engine, req, t_send, (rec, user, item, turns))
        except (EngineError, chatting.ChatError) as e:  # the server's 400, in its words
            rec.status, rec.error_type, rec.error_message = 400, "http_400", f"HTTP 400: {e}"
            rec.t_end_ns = ns(t_send + _REFUSAL_S)
            self.free(t_send + _REFUSAL_S, user)  # its conversation (if any) ends here, its slot or user free

    def free(self, t_free: float, user: int | None) -> None:
        """A request (or a conversation) is over: its user goes on, or its open-loop slot goes to
        the longest waiting request, from `t_free`."""
        if user is not None:
            self.push(t_free, _UserFree(user))
            return
        waiting = self.slots.free()
        if waiting is not None:
            self.push(t_free, _SlotFreed(*waiting))

    def _submit_text(self, engine: Engine, req: Request, t_send: float, sink) -> None:
        chat = self.sim.endpoint == "chat"
        body = {**req.sampling, **self.sim.extra_body}
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

    def on_emission(self, em, t_end: float) -> None:
        """One step's output for one request, read as the client reads its chunk (a reasoning
        model's or a tool call's as the server streams it: servers/emulator/chat.py)."""
        rec, user, (index, req), turns = cast(tuple, em.seq.sink)
        seq = em.seq
        phase = None
        if seq.reasoning_end or seq.tool_call is not None:  # as the server streams it
            d, phase = chatting.delta(seq, em.start, em.words, em.tokens)
            if not d and not em.finished:
                return  # markers only: the server sends no chunk
        rec.chunk_t_ns.append(self.ns(t_end))
        rec.chunk_usage.append(seq.emitted)
        rec.chunk_chars.append(-1)
        if seq.reasoning_end or seq.tool_call is not None or rec.chunk_phase is not None:
            # the reasoning count a server gives only with a reasoning parser
            phases.note(rec, phase, seq.reasoning_tokens if self.engine.cfg.reasoning else None)
        rec.usage_completion_tokens = seq.emitted
        if rec.prompt_tokens is None:
            rec.prompt_tokens = len(seq.prompt)
        if em.finished:
            self.finished(rec, seq, t_end)
            if req.followups and self.next_turn(seq, (index, req), user, turns, t_end):
                return
            self.free(t_end + self.sim.client_rtt_s, user)  # one round trip later

    def finished(self, rec: RequestRecord, seq, t_end: float) -> None:
        rec.done = True
        rec.finish_reason = seq.finish_reason
        rec.t_end_ns = self.ns(t_end)
        if seq.sd is not None:  # vLLM's per-request counts, as the last chunk carries them
            sd = seq.sd.to_dict()
            rec.server_draft_tokens = sd["num_draft_tokens"]
            rec.server_accepted_tokens = sd["num_accepted_draft_tokens"]
            rec.server_spec_steps = sd["num_spec_steps"]
            rec.server_step_accepted = sd.get("per_step_accepted")  # with `detailed`

    def next_turn(self, seq, item: tuple[int, Request], user: int | None, turns: Conversation, t_end: float) -> bool:
        """The conversation's next turn, due after the think time: the history with this reply,
        as streamed (False: none before the deadline)."""
        index, req = item
        calls: list[dict] | None = None
        if seq.reasoning_end or seq.tool_call is not None:  # as the client takes them apart
            msg = chatting.message(seq)
            reply = msg.get("content") or ""
            calls = [{"id": c["id"], **c["function"]} for c in msg.get("tool_calls") or ()] or None
        else:
            reply = "".join(" " + w for w in seq.words[: seq.emitted])
        pause, nxt = cast(tuple, turns.next(req, reply, calls))  # it has followups: a turn is next
        t_due = t_end + pause + self.sim.client_rtt_s
        if self.deadline is not None and t_due >= self.deadline:
            return False
        self.push(t_due, _Turn((index, nxt), user, turns))
        return True

    def result(self) -> RunResult:
        self.records.sort(key=lambda r: r.index)
        first = sorted(self.firsts.values())
        info = (
            {
                "ramp_s": (first[-1] - first[0]) / 1e9 if len(first) > 1 else None,
                "first_sends_ns": [first[0], first[-1]] if first else None,
            }
            if self.sim.load.closed
            else {}
        )
        return RunResult(self.records, [], [], _T0_NS, 0.0, False, info)
