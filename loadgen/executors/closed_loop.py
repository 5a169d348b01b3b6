"""Closed loop: `users` concurrent users; each sends its next request as soon as its previous
one ends. A request's scheduled time is the moment its user became free (the end of its
previous response), so any delay the client adds before sending shows up as lateness. Each
user prepares its next request while the current one is in flight, so preparing it is not part
of that delay. Every user is dealt its first request, in user order, before any user takes a
second: a load of N users then has N requests in flight whenever it has N requests at all (a
user taking its next as it sent one would otherwise let the first users hold them all: 8
requests among 8 users ran 4 in flight). After that a user takes the next whenever it has sent
one, and `loadgen simulate` deals them the same way (`Users`).

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
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from loadgen.executors.feed import Feed, Sender, Share

T = TypeVar("T")

JOIN_GAP_S = 0.001


class Users(Generic[T]):
    """Closed-loop users' requests (the rule this executor and the simulator,
    loadgen.simulate.virtual, both follow): each user numbered in `users` is dealt its first
    request, in that order, when the loop starts; then a user takes its next as soon as it has
    sent one, so it is prepared while the current one is in flight. Which request is a user's
    first never depends on how the users' starts interleave."""

    def __init__(self, take: Callable[[], T | None], users: Iterable[int]) -> None:
        self._take = take
        self._held: dict[int, T | None] = {k: take() for k in users}

    def next(self, user: int) -> T | None:
        """What `user` sends now (None: it has nothing left)."""
        return self._held.pop(user, None)

    def sent(self, user: int) -> None:
        """`user` has just sent one: it takes the one after."""
        self._held[user] = self._take()


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
        item = requests.next(k)
        while item is not None and not feed.expired():
            task = loop.create_task(send(item, t_free, 0))
            if t_free is not None:
                await asyncio.sleep(0)  # let the request go out, then prepare the next one
            requests.sent(k)
            rec = await task
            if t_free is None:  # (a conversation's: its first turn's)
                first_sends.append(rec.t_session_send_ns or rec.t_send_ns)
            t_free = rec.t_end_ns
            item = requests.next(k)

    mine = range(share.worker, len(join_s), share.workers)
    requests = Users(feed.take, mine)  # every user's first dealt before any takes a second
    tasks = [loop.create_task(user(k)) for k in mine]
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
