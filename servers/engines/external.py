"""A server started elsewhere: nothing to start, its URL (the variant's, else the deployment's).
Any deployment may run as external (`--engine external`): its variants are whatever the
servers at those URLs run."""

from __future__ import annotations

from servers.deploy.model import Deployment, Launch
from servers.deploy.schema import fail
from servers.engines.base import Base, register


@register
class External(Base):
    name = "external"
    flags = None
    tool = "OpenAI-compatible server"
    starts = False

    def check(self, dep: Deployment, where: str) -> None:
        missing = [v.name for v in dep.variants.values() if not (v.url or dep.url)]
        if missing:
            fail(
                where,
                f"engine external needs url (for the deployment or each variant); missing for {', '.join(missing)}",
            )

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None) -> Launch:
        url = str(v.url or dep.url).rstrip("/")  # check() made sure there is one
        return Launch(dep.name, v.name, self.name, (), {}, url, dep.served_model_name, dep.startup_timeout_s)

    def emulated(self, dep: Deployment) -> Deployment:
        return dep
