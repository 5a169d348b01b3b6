"""Deployments: one TOML file per target model listing its speculative-decoding variants, and
their rendering into the exact `vllm serve` command (or the emulator's, with the same flags),
or, for engine llama.cpp, the `llama-server` command (servers/deployments/llamacpp.py). A file's
keys are declared with the dataclasses they fill (model.py) and checked against them
(schema.py); each engine's needs and command line are one module of render/."""

from servers.deployments import llamacpp
from servers.deployments.catalog import (
    ENGINES,
    VLLM_PORT,
    Deployment,
    DeploymentError,
    Launch,
    Variant,
    acceptance_variant,
    available,
    default_port,
    load,
    render,
    with_acceptance_lengths,
)

__all__ = [
    "ENGINES",
    "VLLM_PORT",
    "Deployment",
    "DeploymentError",
    "Launch",
    "Variant",
    "acceptance_variant",
    "available",
    "default_port",
    "llamacpp",
    "load",
    "render",
    "with_acceptance_lengths",
]
