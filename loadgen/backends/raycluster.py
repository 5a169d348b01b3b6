"""Joining a Ray cluster (`--ray [ADDRESS]`), for sweeps across nodes (loadgen.sweep.cluster)
and for one run's load from several client nodes (loadgen.backends.ray_workers). Ray is an optional extra."""

from __future__ import annotations

import socket

INSTALL = "pip install 'loadgen[ray]'"


class ClusterError(Exception):
    """Ray missing, the cluster unreachable, or short of the resource the servers need."""


def _ray():
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--ray needs Ray, which is not installed here: {INSTALL}") from None
    return ray


def default_resource(engine: str) -> str:
    """What a server of `engine` asks Ray for: its engine's resource (servers/engines: vLLM
    GPUs; the emulator and the CPU engines CPUs)."""
    from servers import engines

    return engines.get(engine).resource


def resource_request(resource: str, n: int) -> dict:
    """Ray's task options asking for `n` of `resource`: its own keywords for CPU and GPU (Ray
    refuses those names as custom resources), else a custom resource, with the one CPU every
    task needs."""
    if resource == "CPU":
        return {"num_cpus": max(1, n)}
    if resource == "GPU":
        return {"num_cpus": 1, "num_gpus": n}
    return {"num_cpus": 1, "resources": {resource: n}}


def connect(
    address: str | None,
    resource: str,
    per_server: int,
    what: str = "each server",
    fix: str = "add nodes with that resource, or name the resource its nodes have with --ray-resource",
):
    """Join the cluster at `address` (None: RAY_ADDRESS, a cluster already running on this
    host, else a new local one), which must have `per_server` of `resource` in all."""
    ray = _ray()
    _reachable(address)
    try:
        ray.init(
            address=address,
            ignore_reinit_error=True,
            logging_level="WARNING",
            log_to_driver=False,
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = address or "RAY_ADDRESS / this host"
        raise ClusterError(
            f"--ray {where}: cannot join the Ray cluster ({str(e).splitlines()[0]}); "
            "start one with `ray start --head`, or give its address"
        ) from None
    have = ray.cluster_resources().get(resource, 0)
    if have < per_server:
        ray.shutdown()
        raise ClusterError(f"--ray: the cluster has {have:g} {resource!r} in all and {what} needs {per_server}; {fix}")
    return ray


def _reachable(address: str | None) -> None:
    """A HOST:PORT that accepts no connection is said at once (Ray itself retries for minutes)."""
    if not address or "://" in address or address == "auto" or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5.0):
            pass
    except (OSError, ValueError) as e:
        raise ClusterError(
            f"--ray {address}: no Ray cluster answers there ({getattr(e, 'strerror', None) or e}); "
            "start one with `ray start --head`, or give its HOST:PORT"
        ) from None
