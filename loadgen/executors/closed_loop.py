"""Closed loop: `users` concurrent users; each sends its next request as soon as its previous
one ends. A request's scheduled time is the moment its user became free (the end of its
previous response), so any delay the client adds before sending shows up as lateness. Each
user prepares its next request while the current one is in flight, so preparing it is not part
of that delay. A user takes its first two requests together, so which requests a user sends
does not depend on how the users' starts interleave (a stall at the start would otherwise deal
them differently from run to run, and the batches the server sees with them); after that it
takes the next whenever it has sent one, and `loadgen simulate` deals them the same way.

Users join `JOIN_GAP_S` apart at the earliest (1 ms: a 256-user loop is running after a quarter second),
because N first requests sent in one burst keep the client busy for N times the cost of a
send, delaying the timestamps of the responses already arriving. A user's first request counts
as scheduled when it is sent; the spread of the first sends is reported as the ramp
(`sending.ramp_s` in the summary). When each user joins is the load shape's (a ramp's users
join over its seconds). A worker's share of the users (loadgen.backends.worker_processes) are those
numbered worker, worker + workers, ..., each joining at its own number's time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from loadgen.executors.feed import Feed, Sender, Share

T = TypeVar("T")

JOIN_GAP_S = 0.001


class User(Generic[T]):
    """A closed-loop user's requests (the rule this executor and the simulator,
    loadgen.simulate.virtual, both follow). It takes its first two together, then the next as soon as
    it has sent one: which requests a user sends does not depend on how the users' starts
    interleave (a stall at the start would otherwise deal them differently from run to run), and
    the next one is prepared while the current one is in flight."""

    def __init__(self, take: Callable[[], T | None]) -> None:
        self._take = take
        self._next: T | None = None
        self._started = False

    def next(self) -> T | None:
        """What the user sends now (None: it has nothing left)."""
        if not self._started:
            self._started = True
            return self._take()
        return self._next

    def sent(self) -> None:
        """It has just sent one: take the one after."""
        self._next = self._take()


async def run(feed: Feed, send: Sender, *, join_s: list[float], t0_ns: int, share: Share = Share()) -> dict:
    """One user per entry of `join_s`, user k joining `join_s[k]` seconds after `t0_ns` (the
    shape's schedule: loadgen.shapes). Returns {"ramp_s": spread of the users' first sends,
    "first_sends_ns": [first, last]}."""
    loop = asyncio.get_running_loop()
    first_sends: list[int] = []

    async def user(k: int) -> None:
        delay = (t0_ns - time.monotonic_ns()) / 1e9 + join_s[k]
        if delay > 0:
            await asyncio.sleep(delay)
        t_free = None  # first request: scheduled when sent
        requests = User(feed.take)  # the take-ahead rule, as the simulator follows it
        item = requests.next()
        while item is not None and not feed.expired():
            task = loop.create_task(send(item, t_free, 0))
            if t_free is not None:
                await asyncio.sleep(0)  # let the request go out, then prepare the next one
            requests.sent()
            rec = await task
            if t_free is None:  # (a conversation's: its first turn's)
                first_sends.append(rec.t_session_send_ns or rec.t_send_ns)
            t_free = rec.t_end_ns
            item = requests.next()

    tasks = [loop.create_task(user(k)) for k in range(share.worker, len(join_s), share.workers)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    if not first_sends:
        return {"ramp_s": None, "first_sends_ns": None}
    return {
        "ramp_s": (max(first_sends) - min(first_sends)) / 1e9,
        "first_sends_ns": [min(first_sends), max(first_sends)],
    }
