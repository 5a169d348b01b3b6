"""Deployments: one TOML file per target model listing its speculative-decoding variants, and
their rendering into the exact command of the engine that serves them (`vllm serve`, the
emulator with the same flags, or another engine's: servers/engines/). A file's keys are
declared with the dataclasses they fill (servers/deploy/model.py) and checked against them
(servers/deploy/schema.py); each
engine's own keys, needs and command line are its module's in servers/engines/."""

from servers.deployments.catalog import (
    Deployment,
    DeploymentError,
    Launch,
    Variant,
    acceptance_variant,
    available,
    default_port,
    engine_names,
    load,
    on_engine,
    render,
    with_acceptance_lengths,
)

__all__ = [
    "Deployment",
    "DeploymentError",
    "Launch",
    "Variant",
    "acceptance_variant",
    "available",
    "default_port",
    "engine_names",
    "load",
    "on_engine",
    "render",
    "with_acceptance_lengths",
]
