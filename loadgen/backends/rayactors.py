"""The load from N Ray actors spread over a cluster's nodes (`--workers N --ray`): loadgen.backends.ray_workers."""

from __future__ import annotations

from loadgen.backends.base import Backend
from loadgen.backends.worker_processes import check_workers


class RayActors(Backend):
    name = "ray"

    def __init__(self, ray, workers: int, workload) -> None:
        self.ray, self.workers, self.workload = ray, workers, workload

    def check(self, spec) -> None:
        check_workers(self.workers, spec)

    async def execute(self, spec, requests, *, stop=None, on_progress=None, on_start=None, on_record=None):
        from loadgen.backends.ray_workers import execute_on_ray

        return await execute_on_ray(self.ray, spec, self.workload, self.workers, stop=stop, on_progress=on_progress)
