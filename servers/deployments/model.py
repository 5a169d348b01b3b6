"""What a deployment is, declared once: the dataclasses a TOML file becomes, each field that a
file may set carrying its key's type, bound and fix (servers/deployments/schema.py checks a file
against them); and `Launch`, one server rendered to its exact command."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace

from servers.deployments.schema import DeploymentError, key

ENGINES = ("vllm", "vllm-cpu", "emulator", "external", "llama.cpp")
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
LLAMA_SPEC_EXAMPLE = '{ type = "ngram-simple", draft_n_max = 3 }'


@dataclass(frozen=True)
class Variant:
    name: str
    speculative_config: dict | None = field(default=None, metadata=key(dict, example=SPEC_EXAMPLE))  # vLLM's
    args: tuple[str, ...] = field(default=(), metadata=key("strings"))
    url: str | None = field(default=None, metadata=key(str))
    spec: dict | None = field(default=None, metadata=key(dict, example=LLAMA_SPEC_EXAMPLE))  # llama.cpp's SD

    @property
    def method(self) -> str | None:
        if self.spec is not None:
            return self.spec["type"]
        return None if self.speculative_config is None else self.speculative_config.get("method")


@dataclass(frozen=True)
class Deployment:
    name: str
    source: str
    model: str = field(metadata=key(str, required=True, example='"org/name"'))
    description: str = field(default="", metadata=key(str))
    served_model_name: str = field(default="", metadata=key(str))  # "": the model
    tensor_parallel_size: int = field(default=1, metadata=key(int, least=1))
    max_num_seqs: int | None = field(default=None, metadata=key(int, least=1))
    engine: str = field(default="vllm", metadata=key(str, choices=ENGINES))
    executable: str | None = field(default=None, metadata=key(str))  # None: `vllm`, or llama-server found
    url: str | None = field(default=None, metadata=key(str))  # external
    args: tuple[str, ...] = field(default=(), metadata=key("strings"))
    emulator_args: tuple[str, ...] = field(default=(), metadata=key("strings"))
    startup_timeout_s: float = field(default=900.0, metadata=key(float))
    # the server's environment, over its engine's (engine vllm-cpu: render/vllm_cpu.py's ENV);
    # values may hold {cpus} and {cpu} (servers/deployments/machine.py)
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
    model_file: str | None = field(default=None, metadata=key(str))  # llama.cpp
    slots: int = field(default=1, metadata=key(int, least=1))  # llama.cpp
    context: int | None = field(default=None, metadata=key(int, least=1))  # llama.cpp
    threads: int | None = field(default=None, metadata=key(int, least=1))  # llama.cpp

    def with_engine(self, engine: str | None) -> Deployment:
        if engine is None or engine == self.engine:
            return self
        if engine not in ENGINES:
            raise DeploymentError(f"engine {engine!r}: use one of {', '.join(ENGINES)}")
        if (engine == "llama.cpp") != (self.engine == "llama.cpp") and engine != "external":
            raise DeploymentError(
                f"deployment {self.name!r} is for {self.engine}; it cannot run on {engine} "
                "(vLLM's flags and llama.cpp's differ)"
            )
        return replace(self, engine=engine)


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

    def shell(self) -> str:
        """The command as one shell line, environment first."""
        if not self.argv:
            return f"(external server at {self.url})"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.argv)
