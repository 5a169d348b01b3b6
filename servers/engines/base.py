"""What a serving engine is to loadgen, declared once: the `Engine` protocol, the `Base` every
member subclasses (defaults for what most engines share), and the registry.

An engine decides *what serves* a deployment's variant. Everything loadgen needs to know of one
lives in its module: how its server's command and environment are rendered (`render`), what it
needs of a deployment file beyond the common keys (`deployment_keys`, `variant_keys`, `check`),
whether it is installed here (`install_problem`), which Ray resource a server of it takes
(`resource`), its Prometheus metric names (`metrics`), how its per-request speculative-decoding
details are asked for and read (`request_fields`, `request_sd`), how it announces itself
(`owned_by` in /v1/models) and whether it keeps connections alive, and how the emulator serves
its deployments (`emulated`). A new engine is one module in servers/engines/ with a class
decorated `@register`: the CLI's engine choices, the sweep's install check, Ray placement, the
metric catalog, the client's per-request reader and the report all read the registry
(tests/test_engines.py proves it with an engine written into a copy of the tree).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from servers.deployments.model import Deployment, Launch, Variant
    from servers.deployments.schema import Key

REGISTRY: dict[str, Engine] = {}


@dataclass(frozen=True)
class Metrics:
    """An engine's Prometheus sample names, by loadgen's key (loadgen/load/metric_names.py
    lists the keys): counters with their `_total`, gauges, histograms (base name), each key's
    names in the order tried (the current name, then older ones). A key the engine has no
    metric for is left out and reads as absent."""

    counters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    gauges: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    histograms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestSD:
    """Where one request's speculative-decoding counts are in the engine's response: the JSON
    keys of the draft tokens proposed, of those accepted and of the verification steps (None:
    not reported). Every engine's `drafted` key holds "draft", which is how the client's hot
    path (loadgen/client/events.py and _hotpath.c) knows to read an event in full."""

    drafted: str
    accepted: str
    steps: str | None = None
    per_step: str | None = None  # a list of each verify step's accepted drafts (vLLM's `detailed`)


MARK = "draft"  # in every RequestSD.drafted key (tests/test_engines.py)


@runtime_checkable
class Engine(Protocol):
    name: str  # the deployment file's `engine = "..."`
    flags: str | None  # whose flags a variant's SD is written in ("vllm", ...); None: none (external)
    port: int | None  # where its server listens unless told (None: a free port)
    resource: str  # what a server of it asks Ray for: "GPU" or "CPU" (tensor_parallel_size of them)
    tool: str  # the serving tool's name in exports (llm-d's Benchmark Report)
    owned_by: str | None  # /v1/models' owned_by of its servers (None: not told apart)
    keep_alive: bool  # False: it closes the connection after every streamed response
    request_fields: Mapping[str, object]  # added to every request's body (asking for SD details)
    metrics: Metrics
    request_sd: RequestSD | None
    deployment_keys: Mapping[str, Key]  # a deployment file's keys only this engine takes
    variant_keys: Mapping[str, Key]  # a variant's keys only this engine takes
    packages: tuple[str, ...]  # PyPI distributions whose versions a sweep's manifest records

    def check(self, dep: Deployment, where: str) -> None: ...

    def check_variant(self, where: str, raw: dict) -> None: ...

    def render(
        self, dep: Deployment, v: Variant, *, port: int, gpus: tuple[int, ...] | None, host: str, executable: str | None
    ) -> Launch: ...

    def install_problem(self, dep: Deployment, executable: str | None) -> str | None: ...

    def emulated(self, dep: Deployment) -> Deployment: ...

    def prepare(self, name: str, path: str) -> None: ...

    def method(self, v: Variant) -> str | None: ...


class Base:
    """Defaults for an engine's members; a subclass sets what differs."""

    name: ClassVar[str] = ""
    flags: ClassVar[str | None] = "vllm"
    port: ClassVar[int | None] = None
    resource: ClassVar[str] = "CPU"
    tool: ClassVar[str] = ""
    owned_by: ClassVar[str | None] = None
    keep_alive: ClassVar[bool] = True
    request_fields: ClassVar[Mapping[str, object]] = {}
    metrics: ClassVar[Metrics] = Metrics()
    request_sd: ClassVar[RequestSD | None] = None
    deployment_keys: ClassVar[Mapping[str, Key]] = {}
    variant_keys: ClassVar[Mapping[str, Key]] = {}
    packages: ClassVar[tuple[str, ...]] = ()

    def check(self, dep: Deployment, where: str) -> None:
        """What the engine needs of a deployment file beyond its declared keys."""

    def check_variant(self, where: str, raw: dict) -> None:
        """What the engine needs of one variant's table beyond its declared keys."""

    def install_problem(self, dep: Deployment, executable: str | None) -> str | None:
        """Why a server of `dep` cannot start here (one line naming the fix), or None."""
        return None

    def emulated(self, dep: Deployment) -> Deployment:
        """`dep` as the emulator serves it (vLLM's flags): the same for vLLM's family."""
        if self.flags != "vllm":
            from servers.deployments.schema import DeploymentError

            raise DeploymentError(
                f"deployment {dep.name!r} is for {self.name}; the emulator serves vLLM's flags, "
                f"which {self.name}'s variants are not written in: run it on {self.name} or external"
            )
        return dep

    def prepare(self, name: str, path: str) -> None:
        """Write a model file `render` asked for (Launch.prepare) that is not a `local:` model."""
        raise ValueError(f"engine {self.name} prepares no {name!r}")

    def method(self, v: Variant) -> str | None:
        """The variant's speculative-decoding method in vLLM's words (None: none)."""
        cfg = v.speculative_config
        return None if cfg is None else cfg.get("method")

    def render(self, dep, v, *, port, gpus, host, executable):  # pragma: no cover - each engine has its own
        raise NotImplementedError


def register(cls: type) -> type:
    """Add an engine class under its `name` (one instance: engines hold no state)."""
    engine = cls()
    if not isinstance(engine, Engine) or not engine.name:
        raise TypeError(f"{cls.__name__} is not an engine (servers/engines/base.py's Engine)")
    REGISTRY[engine.name] = engine
    return cls
