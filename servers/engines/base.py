"""What launching a serving engine is to loadgen, declared once: the `Engine` protocol (a
launcher), the `Base` every member subclasses (defaults for what most engines share), and the
registry. How its servers speak once started is the engine's dialect (dialect.py), named here
by `dialect`.

A launcher decides *what serves* a deployment's variant: how its server's command, environment
and files are rendered (`render`, servers/deploy/model.py's `Launch`), what it needs of a
deployment file beyond the common keys (`deployment_keys`, `variant_keys`, `check`), whether it
is installed here (`install_problem`), which Ray resource a server of it takes (`resource`), how
the emulator serves its deployments (`emulated`), and what it is to the sweep: the engine of the
embedded default (`embedded`), the one that emulates every dialect (`emulates`), one that starts
nothing (`starts`: a server started elsewhere). A new engine is one module in servers/engines/
with a dialect and a class decorated `@register`: the CLI's engine choices, the sweep's install
check, Ray placement, the metric catalog, the client's per-request reader, the emulator's
flavors and the report all read the registries (tests/test_engines.py proves it with an engine
written into a copy of the tree and swept end to end).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from servers.deploy.schema import DeploymentError

if TYPE_CHECKING:
    from servers.deploy.model import Deployment, Launch, Variant
    from servers.deploy.schema import Key

REGISTRY: dict[str, Engine] = {}


@runtime_checkable
class Engine(Protocol):
    name: str  # the deployment file's `engine = "..."`
    flags: str | None  # whose flags a variant's SD is written in ("vllm", ...); None: none (external)
    port: int | None  # where its server listens unless told (None: a free port)
    resource: str  # what a server of it asks Ray for: "GPU" or "CPU" (tensor_parallel_size of them)
    tool: str  # the serving tool's name in exports (llm-d's Benchmark Report)
    dialect: str | None  # how its servers speak (dialect.py's registry); None: as they announce
    embedded: bool  # the engine of the embedded default (a sweep given no deployment)
    emulates: bool  # serves any engine's deployment in that engine's dialect (the emulator)
    starts: bool  # False: nothing to start, a server started elsewhere at a URL
    file_default: bool  # a deployment file that names no engine is for this one
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
    dialect: ClassVar[str | None] = None
    embedded: ClassVar[bool] = False
    emulates: ClassVar[bool] = False
    starts: ClassVar[bool] = True
    file_default: ClassVar[bool] = False
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
