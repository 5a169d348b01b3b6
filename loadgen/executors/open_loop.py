"""Open loop: requests go at their scheduled times whatever the server does. With
`max_concurrency`, a request that finds every slot busy waits for one; that wait is recorded
as queue delay (client-side queueing, part of what a user would see), not hidden. A worker's
share (loadgen.backends.worker_processes) sends every `workers`-th scheduled request, under its part of the cap."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Generic, TypeVar

import numpy as np

from loadgen.executors.feed import Feed, Item, Sender, Share

T = TypeVar("T")


class Slots(Generic[T]):
    """An open loop's cap on requests in flight (the rule this executor and the simulator,
    loadgen.simulate.virtual, both follow): a request that finds every slot busy waits, first
    come first served, and the slot a finished request frees goes straight to the longest
    waiting one. `cap` None: no cap."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.busy = 0
        self.waiting: deque[T] = deque()

    def take(self, waiter: T) -> bool:
        """True: a slot was free and is now this request's; False: `waiter` waits in line."""
        if self.cap is None or self.busy < self.cap:
            self.busy += 1
            return True
        self.waiting.append(waiter)
        return False

    def free(self) -> T | None:
        """A request is done: its slot goes to the longest waiting one (returned: the slot stays
        busy, now its), else it is free."""
        if self.waiting:
            return self.waiting.popleft()
        self.busy -= 1
        return None


async def run(
    feed: Feed,
    send: Sender,
    *,
    offsets_s: np.ndarray,
    t0_ns: int,
    max_concurrency: int | None = None,
    share: Share = Share(),
) -> dict:
    cap = share.split(max_concurrency) if max_concurrency else None
    slots: Slots[asyncio.Future] | None = Slots(cap) if cap else None
    loop = asyncio.get_running_loop()
    in_flight: set[asyncio.Task] = set()

    async def one(item: Item, t_sched: int) -> None:
        if slots is None:
            await send(item, t_sched, 0)
            return
        waited = 0
        turn = loop.create_future()
        if not slots.take(turn):  # wait for the slot a finished request hands on
            t_wait = time.monotonic_ns()
            await turn
            waited = time.monotonic_ns() - t_wait
        try:
            await send(item, t_sched, waited)
        finally:
            nxt = slots.free()
            while nxt is not None and nxt.done():  # a waiter cancelled (the run stopped): next
                nxt = slots.free()
            if nxt is not None:
                nxt.set_result(None)

    try:
        for offset in offsets_s[share.worker :: share.workers].tolist():
            t_sched = t0_ns + int(offset * 1e9)
            if feed.expired(t_sched):
                break
            item = feed.take()  # encoded before sleeping, off the send path
            if item is None:
                break
            delay = (t_sched - time.monotonic_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            if feed.stopped:
                break
            task = loop.create_task(one(item, t_sched))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.gather(*in_flight)
    finally:
        for task in in_flight:
            task.cancel()
    return {}
