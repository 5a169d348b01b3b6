"""vLLM: `vllm serve MODEL` with the deployment's and the variant's flags, on its GPUs."""

from __future__ import annotations

import json

from servers import localmodels
from servers.deployments.model import Deployment, Launch, Variant
from servers.deployments.schema import DeploymentError

PORT = 8000  # vLLM's own default: a server started for loadgen is where its users expect it


def check(dep: Deployment, where: str) -> None:
    pass  # the declared keys say it all


def gpus_for(dep: Deployment, gpus: tuple[int, ...] | None) -> tuple[int, ...]:
    gpus = tuple(range(dep.tensor_parallel_size)) if gpus is None else tuple(gpus)
    if len(gpus) != dep.tensor_parallel_size:
        raise DeploymentError(
            f"deployment {dep.name!r} needs {dep.tensor_parallel_size} GPUs per server, given {len(gpus)}"
        )
    return gpus


def flags(dep: Deployment, v: Variant, port: int, host: str) -> list[str]:
    """vLLM's flags for the variant (the emulator takes the same); a `local:NAME` model as the
    directory loadgen makes it in (servers/localmodels)."""
    out = [
        localmodels.resolve(dep.model),
        "--host",
        host,
        "--port",
        str(port),
        "--tensor-parallel-size",
        str(dep.tensor_parallel_size),
        "--served-model-name",
        dep.served_model_name,
    ]
    if dep.max_num_seqs is not None:
        out += ["--max-num-seqs", str(dep.max_num_seqs)]
    out += [*dep.args, *v.args]
    if v.speculative_config is not None:
        cfg = dict(v.speculative_config)
        if localmodels.is_local(cfg.get("model")):
            cfg["model"] = localmodels.resolve(cfg["model"])
        out += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return out


def local_models(dep: Deployment, v: Variant) -> tuple[tuple[str, str], ...]:
    """The `local:NAME` models the variant's server reads, (name, directory) each, for the
    launcher to make before it starts."""
    names = [dep.model, (v.speculative_config or {}).get("model")]
    return tuple(
        (n, localmodels.resolve(n)) for n in dict.fromkeys(names) if isinstance(n, str) and localmodels.is_local(n)
    )


def render(
    dep: Deployment,
    v: Variant,
    *,
    port: int,
    gpus: tuple[int, ...] | None = None,
    host: str = "127.0.0.1",
    llama_server: str | None = None,
) -> Launch:
    return Launch(
        dep.name,
        v.name,
        "vllm",
        (dep.executable or "vllm", "serve", *flags(dep, v, port, host)),
        {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus_for(dep, gpus)))},
        f"http://{host}:{port}",
        dep.served_model_name,
        dep.startup_timeout_s,
        local_models(dep, v),
    )
