"""What executors hand out: the workload's requests, numbered, with warm-up marked, bounded
by count and/or a deadline; or one worker's share of them (every `workers`-th, from its own)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from loadgen.client.record import RequestRecord
from workloads import Request


@dataclass(slots=True, frozen=True)
class Item:
    index: int
    request: Request
    body: bytes
    warmup: bool


# A sender sends one item scheduled at `t_scheduled_ns` (None: scheduled when sent), having
# waited `queue_delay_ns` for a concurrency slot, and returns its record.
Sender = Callable[[Item, "int | None", int], Coroutine[Any, Any, RequestRecord]]


@dataclass(slots=True, frozen=True)
class Share:
    """Worker `worker` of `workers` (loadgen.backends.worker_processes): it sends items worker, worker +
    workers, worker + 2 workers, ... of the one numbering, each at its own scheduled time."""

    worker: int = 0
    workers: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.worker < self.workers:
            raise ValueError(f"worker {self.worker} of {self.workers}")

    def split(self, total: int) -> int:
        """This worker's part of `total` (users, a concurrency cap), spread as evenly as can be."""
        return total // self.workers + (self.worker < total % self.workers)


class Feed:
    """Hands out `warmup + num` items (or without end when `num` is None) until the deadline
    (a `monotonic_ns` value, or None), or until `stop()`. `on_measure_start` is called when
    the first item past warm-up is handed out. With a `share`, only that worker's items (the
    request sequence is the same in every worker, numbered the same); `skip`: numbers drawn but
    not handed out (measured before: a sweep cell continued after a kill)."""

    def __init__(
        self,
        requests: Iterator[Request],
        encode: Callable[[Request], bytes],
        *,
        num: int | None,
        warmup: int = 0,
        deadline_ns: int | None = None,
        on_measure_start: Callable[[], None] | None = None,
        share: Share = Share(),
        skip: frozenset[int] = frozenset(),
    ) -> None:
        self._requests = itertools.islice(requests, share.worker, None, share.workers)
        self._stride = share.workers
        self._encode = encode
        self._limit = None if num is None else warmup + num
        self._warmup = warmup
        self._next = share.worker
        self.deadline_ns = deadline_ns
        self.stopped = False
        self._on_measure_start = on_measure_start
        self._skip = skip  # numbers already measured (a continued sweep cell): drawn, not handed out

    def stop(self) -> None:
        self.stopped = True

    def expired(self, now_ns: int | None = None) -> bool:
        if self.stopped:
            return True
        if self.deadline_ns is None:
            return False
        return (now_ns if now_ns is not None else time.monotonic_ns()) >= self.deadline_ns

    def take(self) -> Item | None:
        if self.stopped or (self._limit is not None and self._next >= self._limit):
            return None
        req = next(self._requests, None)
        while req is not None and self._next in self._skip:
            self._next += self._stride
            if self._limit is not None and self._next >= self._limit:
                return None
            req = next(self._requests, None)
        if req is None:
            return None
        i = self._next
        self._next += self._stride
        if self._on_measure_start is not None and i >= self._warmup:
            self._on_measure_start()
            self._on_measure_start = None
        return Item(i, req, self._encode(req), i < self._warmup)
