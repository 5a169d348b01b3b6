"""The server a run measures: one already running (its URL), the embedded emulator, or a
catalog deployment's variant started for the run; a started one is always stopped afterwards."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import LoadgenError
from servers import engines

# What `loadgen run` measures without --base-url: the emulated engine (servers/emulator) with the
# study's Llama-3.1-8B on H100 cost model and EAGLE, in real time.
EMBEDDED_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
EMBEDDED_SPEC = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'

Note = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """`base_url`: a running server; else `servers` + `variant` (+ `engine`): a catalog
    deployment's variant, started here; else the embedded emulator. `time_scale`: how much
    slower an emulator loadgen starts runs its GPU (None: its own default)."""

    base_url: str | None = None
    servers: str | None = None
    variant: str | None = None
    engine: str | None = None
    time_scale: float | None = None
    declared_spec: str | None = None  # --speculative-config: what the server at base_url runs

    def __post_init__(self) -> None:
        if self.time_scale is not None and self.base_url is not None:
            raise LoadgenError(
                "--time-scale runs loadgen's own emulator slower; a server at --base-url keeps "
                "its own time (an emulator started with --time-scale says so in its /metrics, "
                "and loadgen reads it): drop --time-scale"
            )

    @property
    def embedded(self) -> bool:
        return self.base_url is None and self.servers is None

    @property
    def speculative_config(self) -> str | None:
        """The server's speculative config as JSON: what loadgen itself asked for (the embedded
        emulator's EAGLE, a --servers variant's own), what the user declared for a server at
        --base-url (--speculative-config), else None (nothing declares its drafter)."""
        if self.embedded:
            return EMBEDDED_SPEC
        if self.base_url is not None:
            return self.declared_spec
        from servers.deployments import DeploymentError, load

        try:
            variant = load(self.servers or "").variants.get(self.variant or "")
        except DeploymentError:
            return None
        spec = getattr(variant, "speculative_config", None)
        return json.dumps(spec, separators=(",", ":")) if spec else None


@contextlib.contextmanager
def serving(target: Target, note: Note = lambda _: None) -> Iterator[str]:
    """The target's URL while it serves."""
    if target.base_url is not None:
        yield target.base_url
    elif target.servers is not None:
        yield from _variant_server(target, note)
    else:
        yield from _embedded(target, note)


def _embedded(target: Target, note: Note):
    from servers.embedded import ServerStartError, emulator_server

    scale = [] if target.time_scale is None else ["--time-scale", str(target.time_scale)]
    try:
        with emulator_server(EMBEDDED_MODEL, "--speculative-config", EMBEDDED_SPEC, *scale) as srv:
            pace = (
                "in real time"
                if not target.time_scale or target.time_scale == 1
                else f"{target.time_scale:g}x slower than real time"
            )
            note(
                f"No --base-url: measuring the embedded emulator at {srv.url} "
                f"({EMBEDDED_MODEL} on one emulated H100, EAGLE k=3, {pace})"
            )
            yield srv.url
    except ServerStartError as e:
        raise LoadgenError(str(e), code=1) from None


def _variant_server(target: Target, note: Note):
    from servers.deployments import DeploymentError, default_port, load, on_engine, render
    from servers.launcher import LaunchError, Server, free_port

    assert target.servers is not None  # serving() comes here only with one
    try:
        dep = on_engine(load(target.servers), target.engine)
        if target.variant is None:
            raise DeploymentError(f"--servers {target.servers} needs --variant, one of {', '.join(dep.variants)}")
        launch = render(dep, target.variant, port=default_port(dep.engine) or free_port())
    except DeploymentError as e:
        raise LoadgenError(str(e)) from None
    if target.time_scale is not None:
        launch = with_time_scale(launch, target.time_scale)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with Server(launch, Path(tmp) / "server.log", progress=note) as srv:
                note(f"started {target.variant}: {launch.shell()}")
                yield srv.launch.url
        except LaunchError as e:
            raise LoadgenError(str(e)) from None


def with_time_scale(launch, time_scale: float):
    """A rendered emulator launch that runs at `time_scale` (a later --time-scale wins over one in
    the deployment's emulator_args); LoadgenError for any other engine."""
    if not engines.emulates(launch.engine):
        raise LoadgenError(
            f"--time-scale runs the emulated GPU slower; {launch.variant} runs on {launch.engine}, "
            "whose hardware keeps its own time: drop --time-scale (or add --engine emulator)"
        )
    return dataclasses.replace(launch, argv=(*launch.argv, "--time-scale", str(time_scale)))
