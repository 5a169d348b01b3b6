"""Multi-turn conversations. A request with `followups` (workloads: `turns=session` of ShareGPT,
MT-Bench and Spec-Bench, `synthetic:session`) is a conversation's first turn. The load shape
schedules conversations as it schedules requests (closed loop: a user holds one conversation
at a time and starts the next when the last turn's response ends; open loop: conversations
arrive at the shape's times, and `--max-concurrency` bounds conversations in flight); the
turns follow one another here. Turn n+1 is due a think time after turn n's response ended and
is sent then, with the whole history: every earlier user turn and the server's actual reply
to each, its text exactly as streamed. Its lateness is measured from that due time. A failed
turn ends its conversation (recorded; the later turns are not sent: they would carry no reply).
On the completions endpoint the history is one prompt: the previous prompt, the reply, a blank
line, the next user turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loadgen.client.record import RequestRecord
from loadgen.executors.feed import Feed, Item, Sender
from workloads import Request


@dataclass(frozen=True)
class Think:
    """The pause between a reply and the user's next turn: `mean_s` seconds, constant or
    exponentially distributed (seeded per conversation)."""

    mean_s: float = 0.0
    exponential: bool = False

    @classmethod
    def parse(cls, text: str | float | None) -> Think:
        """`S` (constant) or `exp:S` (exponential with mean S), seconds."""
        if text is None:
            return cls()
        raw = str(text).strip()
        exp = raw.startswith("exp:")
        try:
            mean = float(raw[4:] if exp else raw)
        except ValueError:
            mean = float("nan")
        if not 0 <= mean < float("inf"):
            raise ValueError(f"think_time {text!r}: give seconds >= 0, or exp:S for an exponential pause of mean S")
        return cls(mean, exp)

    def draw(self, rng: np.random.Generator) -> float:
        if self.mean_s == 0:
            return 0.0
        return float(rng.exponential(self.mean_s)) if self.exponential else self.mean_s

    def describe(self) -> dict:
        return {"mean_s": self.mean_s, "distribution": "exponential" if self.exponential else "constant"}


def next_turn(prev: Request, reply: str, user_text: str, tool_calls: list[dict] | None = None) -> Request:
    """The turn after `prev`, whose response was `reply`: the history so far, the reply, the
    user's next words; its own later turns are `prev`'s after this one. A reply that called
    tools (`tool_calls`: id, name, arguments as streamed) goes back as the assistant's calls, and
    the next words as each call's result (a `tool` message), as an agent returns them."""
    k = prev.turn + 1
    messages: tuple[dict, ...]
    if tool_calls:
        calls = [
            {
                "id": c.get("id") or f"call-{k}-{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for i, c in enumerate(tool_calls)
        ]
        results = [{"role": "tool", "tool_call_id": c["id"], "content": user_text} for c in calls]
        messages = (*prev.as_messages(), {"role": "assistant", "content": reply or None, "tool_calls": calls}, *results)
    else:
        messages = (
            *prev.as_messages(),
            {"role": "assistant", "content": reply},
            {"role": "user", "content": user_text},
        )
    prompt = None if prev.prompt is None else f"{prev.prompt}{reply}\n\n{user_text}"
    session = prev.session or prev.id
    return dataclasses.replace(
        prev,
        id=f"{session}-t{k}",
        prompt=prompt,
        messages=messages,
        turn=k,
        followups=prev.followups[1:],
        session=session,
        reference=None,
    )


def turn_seed(seed: int, index: int) -> np.random.Generator:
    """The think-time draws of conversation `index` (the same in a real run and in simulate)."""
    return np.random.default_rng([seed, index, 7])


class Conversation:
    """A conversation's later turns (the rule `conversing` and the simulator,
    loadgen.simulate.virtual, both follow): turn n+1 is due a think time after turn n's reply ended
    (drawn from the conversation's own seed: the same in a real run and in a simulation), with
    the whole history and the reply as streamed; it is over when no turn is left."""

    def __init__(self, think: Think, seed: int, index: int) -> None:
        self.think = think
        self.rng = turn_seed(seed, index)

    def next(self, req: Request, reply: str, tool_calls: list[dict] | None = None) -> tuple[float, Request] | None:
        """(the pause before it in emulated seconds, the next turn) after `req` was answered by
        `reply` (and `tool_calls`); None when `req` was the last turn."""
        if not req.followups:
            return None
        return self.think.draw(self.rng), next_turn(req, reply, req.followups[0], tool_calls)


def reply_of(rec: RequestRecord) -> str:
    """What a turn's next turn sends back as the assistant's reply: the streamed text, without
    a reasoning model's thinking (chat templates drop it from the history) or a tool call's
    arguments (sent back as the call)."""
    if rec.chunk_phase is None and not rec.tool_calls:
        return "".join(rec.chunk_text or ())
    return "".join(rec.answer_text or ())


def conversing(
    send: Sender,
    encode: Callable[[Request], bytes],
    feed: Feed,
    *,
    think: Think,
    seed: int,
    scale: float = 1.0,
    keep_text: bool = False,
) -> Sender:
    """A sender that sends a conversation's turns one after another (anything else as `send`
    does), returning the last turn's record. `scale`: real seconds per emulated second (think
    times stretch with a dilated emulator's clock); `keep_text`: keep every turn's text (else
    only until the next turn is built). Each later turn's record carries when the first turn
    was sent (`t_session_send_ns`: a closed-loop user's first send, for the ramp)."""

    async def converse(item: Item, t_sched: int | None, queue_delay: int) -> RequestRecord:
        req = item.request
        rec = await send(item, t_sched, queue_delay)
        if not req.followups:
            return rec
        turns = Conversation(think, seed, item.index)
        first_send = rec.t_send_ns
        while rec.ok and (after := turns.next(req, reply_of(rec), rec.tool_calls)) is not None:
            if not keep_text:
                rec.chunk_text = rec.answer_text = rec.tool_calls = None
            pause, req = after
            due = rec.t_end_ns + int(pause * scale * 1e9)
            nxt = Item(item.index, req, encode(req), item.warmup)  # encoded before the pause
            if feed.expired(due):
                break
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            rec = await send(nxt, due, 0)
            rec.t_session_send_ns = first_send
        if not keep_text:
            rec.chunk_text = rec.answer_text = rec.tool_calls = None  # a failed turn's partial reply, not needed
        return rec

    return converse
