"""The load from N worker processes on this host (`--workers N`): loadgen.backends.worker_processes."""

from __future__ import annotations

from loadgen.backends.base import Backend
from loadgen.backends.worker_processes import check_workers, execute_workers


class Processes(Backend):
    name = "processes"

    def __init__(self, workers: int, workload) -> None:
        self.workers, self.workload = workers, workload

    def check(self, spec) -> None:
        check_workers(self.workers, spec)

    async def execute(self, spec, requests, *, stop=None, on_progress=None, on_start=None, on_record=None):
        return await execute_workers(spec, self.workload, self.workers, stop=stop, on_progress=on_progress)
