"""Open loop: requests go at their scheduled times whatever the server does. With
`max_concurrency`, a request that finds every slot busy waits for one; that wait is recorded
as queue delay (client-side queueing, part of what a user would see), not hidden. A worker's
share (loadgen.backends.worker_processes) sends every `workers`-th scheduled request, under its part of the cap."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from loadgen.executors.feed import Feed, Item, Sender, Share


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
    slots = asyncio.Semaphore(cap) if cap else None
    loop = asyncio.get_running_loop()
    in_flight: set[asyncio.Task] = set()

    async def one(item: Item, t_sched: int) -> None:
        if slots is None:
            await send(item, t_sched, 0)
            return
        waited = 0
        if slots.locked():
            t_wait = time.monotonic_ns()
            await slots.acquire()
            waited = time.monotonic_ns() - t_wait
        else:
            await slots.acquire()
        try:
            await send(item, t_sched, waited)
        finally:
            slots.release()

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
