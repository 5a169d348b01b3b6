"""Rendering a deployment's variant into the server it runs: one module per engine, each with
`check(dep, where)` (what that engine needs of a deployment file, beyond the declared keys) and
`render(dep, variant, *, port, gpus, host, llama_server) -> Launch`. A new engine is a module
here and its name in ENGINES (servers/deployments/model.py)."""

from __future__ import annotations

from types import ModuleType

from servers.deployments.render import emulator, external, llamacpp, vllm, vllm_cpu

BY_ENGINE: dict[str, ModuleType] = {
    "vllm": vllm,
    "vllm-cpu": vllm_cpu,
    "emulator": emulator,
    "external": external,
    "llama.cpp": llamacpp,
}
