"""A server started elsewhere: nothing to start, its URL (the variant's, else the deployment's)."""

from __future__ import annotations

from servers.deployments.model import Deployment, Launch, Variant
from servers.deployments.schema import fail

PORT = None


def check(dep: Deployment, where: str) -> None:
    missing = [v.name for v in dep.variants.values() if not (v.url or dep.url)]
    if missing:
        fail(where, f"engine external needs url (for the deployment or each variant); missing for {', '.join(missing)}")


def render(
    dep: Deployment,
    v: Variant,
    *,
    port: int,
    gpus: tuple[int, ...] | None = None,
    host: str = "127.0.0.1",
    llama_server: str | None = None,
) -> Launch:
    url = str(v.url or dep.url).rstrip("/")  # check() made sure there is one
    return Launch(dep.name, v.name, "external", (), {}, url, dep.served_model_name, dep.startup_timeout_s)
