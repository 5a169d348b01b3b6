"""What every execution backend is."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import ClassVar

from loadgen.client.record import RequestRecord
from loadgen.load.execute import RunResult, RunSpec
from workloads import Request

# (requests done, of which failed) since the last call: how every backend reports progress
Progress = Callable[[int, int], None]


class Backend:
    name: ClassVar[str]
    # whether requests are sent by this process (so per-request hooks, e.g. live metrics, see them)
    local: ClassVar[bool] = False

    def check(self, spec: RunSpec) -> None:
        """ValueError naming the limit when this backend cannot run `spec`."""

    async def execute(
        self,
        spec: RunSpec,
        requests: Iterator[Request],
        *,
        stop: asyncio.Event | None = None,
        on_progress: Progress | None = None,
        on_start: Callable[[RequestRecord], None] | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RunResult:
        """Run the load; `stop` ends it early, keeping what finished. `on_start` and `on_record`
        see each request as it goes and ends (local backends only)."""
        raise NotImplementedError
