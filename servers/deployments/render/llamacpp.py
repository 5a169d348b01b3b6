"""llama.cpp: `llama-server -m GGUF --alias NAME --host --port -np -c -t --metrics [spec flags]
[args]`, on CPU (no GPU assignment); its speculative decoding is the variant's `spec`
(servers/deployments/llamacpp.py checks it and renders its flags)."""

from __future__ import annotations

from servers.deployments import llamacpp
from servers.deployments.model import Deployment, Launch, Variant
from servers.deployments.schema import DeploymentError, fail

PORT = None  # a free port when started
STARTUP_TIMEOUT_S = 300.0


def check(dep: Deployment, where: str) -> None:
    if not dep.model_file:
        fail(
            where,
            'engine llama.cpp needs model_file = "/path/model.gguf" (or a packaged model: '
            + ", ".join(llamacpp.PACKAGED)
            + ")",
        )


def render(
    dep: Deployment,
    v: Variant,
    *,
    port: int,
    gpus: tuple[int, ...] | None = None,
    host: str = "127.0.0.1",
    llama_server: str | None = None,
) -> Launch:
    try:
        model, packaged = llamacpp.model_path(dep.model_file or "")  # check() made sure there is one
        spec, needs = llamacpp.spec_flags(v.spec)
    except llamacpp.LlamaCppError as e:
        raise DeploymentError(f"deployment {dep.name!r}: {e}") from None
    wanted = llama_server or dep.executable
    exe = llamacpp.find_server(wanted) or wanted or "llama-server"
    argv = [exe, "-m", model, "--alias", dep.served_model_name, "--host", host, "--port", str(port)]
    argv += ["-np", str(dep.slots)]
    if dep.context is not None:
        argv += ["-c", str(dep.context)]
    if dep.threads is not None:
        argv += ["-t", str(dep.threads)]
    argv += ["--metrics", *spec, *dep.args, *v.args]
    prepare = ((packaged, model),) if packaged else ()
    return Launch(
        dep.name,
        v.name,
        "llama.cpp",
        tuple(argv),
        {},
        f"http://{host}:{port}",
        dep.served_model_name,
        min(dep.startup_timeout_s, STARTUP_TIMEOUT_S),
        prepare + tuple(needs),
    )
