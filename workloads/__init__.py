"""Workloads: the requests a load test sends, as plain data.

`open_workload(spec)` reads any workload spec (a catalog name, FORMAT:PATH, hf:ID or
synthetic:KIND; see workloads/spec.py) into a `Workload`, whose `requests(num, seed)` is a
deterministic sample of `Request`s, the one form every source produces.
"""

from workloads.errors import BadRecord, WorkloadError
from workloads.request import Request
from workloads.synthetic import KINDS, kind_like, random_lengths
from workloads.workload import Workload, open_workload

__all__ = ["KINDS", "BadRecord", "Request", "Workload", "WorkloadError", "kind_like", "open_workload", "random_lengths"]
