"""Workload errors: each names the input (file and line where there is one) and the fix."""

from __future__ import annotations


class WorkloadError(ValueError):
    pass


class BadRecord(WorkloadError):
    """A record that cannot become a request; with `--skip-bad` it is counted and skipped."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where, self.problem = where, problem
