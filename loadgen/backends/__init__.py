"""Execution backends, a family: where a run's load is generated. Every backend takes the same
`RunSpec` and workload, opens its own window on the server's /metrics around the measurement,
and returns one `RunResult` of the same form, whatever processes or nodes sent the requests.

- `inprocess`: this process's event loop (loadgen.load.execute.execute);
- `processes`: N worker processes on this host, the one schedule split; the processes' own code,
  the split's checks and the merge of their records in `worker_processes.py`;
- `rayactors`: N Ray actors over a cluster's nodes; the actors' code in `ray_workers.py`, joining
  a cluster in `raycluster.py`.

`choose` picks one from what the user asked for; `run`, `check`, `capacity` and the sweep's
cells all go through it (loadgen.run.measurement, loadgen.sweep.cell). A new backend is one module
with a `Backend` subclass, and a line in `choose`."""

from __future__ import annotations

from loadgen.backends.base import Backend, Progress
from loadgen.backends.inprocess import InProcess
from loadgen.backends.processes import Processes
from loadgen.backends.rayactors import RayActors


def choose(workers: int = 1, workload=None, cluster=None) -> Backend:
    """In-process for one worker on this host; worker processes for several; Ray actors when a
    cluster was joined (`cluster`: Ray's module, initialised). `workload`: the
    loadgen.load.workload.WorkloadRef the other processes open (the same seed gives the same requests)."""
    if cluster is not None:
        return RayActors(cluster, workers, workload)
    if workers > 1:
        return Processes(workers, workload)
    return InProcess()


__all__ = ["Backend", "InProcess", "Processes", "Progress", "RayActors", "choose"]
