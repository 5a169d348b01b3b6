"""What a deployment is, declared once: the dataclasses a TOML file becomes, each field that a
file may set carrying its key's type, bound and fix (servers/deploy/schema.py checks a file
against them); and `Launch`, one server rendered to its exact command."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from servers.deploy.schema import key

METHODS = (
    "ngram",
    "draft_model",
    "eagle",
    "eagle3",
    "mtp",
    "medusa",
    "mlp_speculator",
    "suffix",
    "ngram_gpu",
)  # vllm.md
SPEC_EXAMPLE = '{ method = "ngram", num_speculative_tokens = 3 }'


@dataclass(frozen=True)
class Variant:
    name: str
    speculative_config: dict | None = field(default=None, metadata=key(dict, example=SPEC_EXAMPLE))  # vLLM's
    args: tuple[str, ...] = field(default=(), metadata=key("strings"))
    url: str | None = field(default=None, metadata=key(str))
    own: dict = field(default_factory=dict)  # the keys its engine declares (servers/engines: variant_keys)


@dataclass(frozen=True)
class Deployment:
    name: str
    source: str
    model: str = field(metadata=key(str, required=True, example='"org/name"'))
    description: str = field(default="", metadata=key(str))
    served_model_name: str = field(default="", metadata=key(str))  # "": the model
    tensor_parallel_size: int = field(default=1, metadata=key(int, least=1))
    max_num_seqs: int | None = field(default=None, metadata=key(int, least=1))
    engine: str = field(default="", metadata=key(str))  # servers/engines: one of its names (the catalog fills it)
    executable: str | None = field(default=None, metadata=key(str))  # None: the engine's own command
    url: str | None = field(default=None, metadata=key(str))  # external
    args: tuple[str, ...] = field(default=(), metadata=key("strings"))
    emulator_args: tuple[str, ...] = field(default=(), metadata=key("strings"))
    startup_timeout_s: float = field(default=900.0, metadata=key(float))
    # the server's environment, over its engine's (engine vllm-cpu: servers/engines/vllm_cpu.py's ENV);
    # values may hold {cpus} and {cpu} (servers/deploy/machine.py)
    env: dict[str, str] = field(default_factory=dict, metadata=key(dict, example='{ VLLM_CPU_KVCACHE_SPACE = "2" }'))
    # the answer length of a workload that does not set its own (output=...), where the catalog's
    # would not fit or would take too long (a CPU decodes tens of tokens a second)
    output: str | None = field(default=None, metadata=key(str))
    # a cell's measured requests where --num-requests is not given (max(min_requests,
    # requests_per_user x users)) and its warm-up where --warmup is not: a CPU's cells would
    # otherwise take minutes each at one user (None: the sweep's defaults, docs/sweep.md)
    min_requests: int | None = field(default=None, metadata=key(int, least=1))
    requests_per_user: int | None = field(default=None, metadata=key(int, least=1))
    warmup: int | None = field(default=None, metadata=key(int, least=0))
    variants: dict[str, Variant] = field(default_factory=dict, metadata=key(dict, example="[variants.NAME]"))
    own: dict = field(default_factory=dict)  # the keys its engine declares (servers/engines: deployment_keys)


FILES = "{files}"  # in a Launch's argv: the folder its files are written to


@dataclass(frozen=True)
class Launch:
    """One server to start (or, engine external, to use): rendered, nothing left to decide."""

    deployment: str
    variant: str
    engine: str
    argv: tuple[str, ...]  # empty for external
    env: dict[str, str]  # added to the environment
    url: str  # where it will serve
    served_model_name: str
    startup_timeout_s: float
    prepare: tuple[tuple[str, str], ...] = ()  # (packaged model, path) to write before starting
    # (name, text) of files the server reads (a config it takes as a file), written before it
    # starts into a folder beside its log; FILES in argv stands for that folder
    files: tuple[tuple[str, str], ...] = ()

    def argv_in(self, folder: str) -> tuple[str, ...]:
        """The command with its files' folder in place of FILES."""
        return tuple(a.replace(FILES, folder) for a in self.argv)

    def shell(self) -> str:
        """The command as one shell line, environment first."""
        if not self.argv:
            return f"(external server at {self.url})"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.argv)
