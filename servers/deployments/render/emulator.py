"""The emulator (servers/emulator): vLLM's command line, served by `python -m servers.emulator
serve` with the same flags plus the deployment's emulator_args; no GPU needed."""

from __future__ import annotations

import sys

from servers.deployments.model import Deployment, Launch, Variant
from servers.deployments.render import vllm

PORT = None  # a free port when started
STARTUP_TIMEOUT_S = 60.0


def check(dep: Deployment, where: str) -> None:
    pass


def render(
    dep: Deployment,
    v: Variant,
    *,
    port: int,
    gpus: tuple[int, ...] | None = None,
    host: str = "127.0.0.1",
    llama_server: str | None = None,
) -> Launch:
    argv = (sys.executable, "-m", "servers.emulator", "serve", *vllm.flags(dep, v, port, host), *dep.emulator_args)
    return Launch(
        dep.name,
        v.name,
        "emulator",
        argv,
        {"CUDA_VISIBLE_DEVICES": ",".join(map(str, vllm.gpus_for(dep, gpus)))},
        f"http://{host}:{port}",
        dep.served_model_name,
        STARTUP_TIMEOUT_S,
    )
