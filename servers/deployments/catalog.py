"""The deployment catalog (`servers/deployments/*.toml`, or any file of that shape).

    description = "..."
    model = "meta-llama/Llama-3.1-8B-Instruct"
    served_model_name = "..."        # default: model
    tensor_parallel_size = 1         # GPUs per server (CUDA_VISIBLE_DEVICES)
    max_num_seqs = 256               # optional
    engine = "vllm"                  # vllm | vllm-cpu | emulator | external
    executable = "vllm"              # the server command, if not on PATH as `vllm` (`llama-server`)
    url = "http://host:8000"         # engine external: the running server (or per variant)
    args = ["--no-enable-prefix-caching"]   # more flags for every variant
    emulator_args = ["--time-scale", "1"]   # flags only the emulator takes
    startup_timeout_s = 900
    env = { VLLM_CPU_KVCACHE_SPACE = "2" }  # the server's environment ({cpus}, {cpu}: machine.py)
    output = "fixed:64"              # answers of a workload that sets no output= (docs/vllm-cpu.md)

    [variants.eagle]
    speculative_config = { method = "eagle", model = "...", num_speculative_tokens = 3 }
    args = []                        # more flags for this variant
    url = "..."                      # engine external

engine = "llama.cpp" runs llama.cpp's `llama-server` instead (servers/deployments/llamacpp.py):
`model` is then the served name (--alias), `model_file` the GGUF (a path, or a packaged model
such as "gemma3-270m"), `slots` (-np), `context` (-c, shared by the slots), `threads` (-t), and
a variant's speculative decoding is a `spec` table (type, draft_n_max, draft_n_min, ngram_lookup,
ngram_min_hits, draft_model, synth_rates).

The keys are declared with the dataclasses they fill (servers/deployments/model.py) and a file is
checked against that declaration (schema.py); what an engine needs beyond them, and its command
line, is its module's in servers/deployments/render/.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from servers import localmodels
from servers.deployments import llamacpp, machine
from servers.deployments.model import ENGINES, METHODS, Deployment, Launch, Variant
from servers.deployments.render import BY_ENGINE, vllm
from servers.deployments.schema import DeploymentError, check, fail, keys
from servers.emulator import spec as sd_config

__all__ = ["ENGINES", "VLLM_PORT", "Deployment", "DeploymentError", "Launch", "Variant"]

HERE = Path(__file__).resolve().parent
VLLM_PORT = vllm.PORT


def available() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.toml"))


def load(name_or_path: str) -> Deployment:
    """A catalog name (`llama-3.1-8b`) or the path of a TOML file."""
    path = Path(name_or_path)
    if not (path.suffix == ".toml" or path.exists()):
        path = HERE / f"{name_or_path}.toml"
        if not path.is_file():
            raise DeploymentError(
                f"unknown deployment {name_or_path!r}; give one of {', '.join(available())} or the path of a TOML file"
            )
    if not path.is_file():
        raise DeploymentError(f"deployment file {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise DeploymentError(f"cannot read deployment file {str(path)!r}: {e}") from None
    return _build(path.stem, str(path), raw)


def _spec(where: str, cfg: dict | None) -> dict | None:
    """vLLM's --speculative-config, beyond its being a table: a known method and k."""
    if cfg is None:
        return None
    method = cfg.get("method")
    if method is not None and method not in METHODS:
        fail(where, f"speculative_config method {method!r} is not one of {', '.join(METHODS)}")
    if method is None and "model" not in cfg:
        fail(where, "speculative_config needs a method (or a draft model)")
    k = cfg.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        fail(where, "speculative_config needs num_speculative_tokens, an integer >= 1")
    try:  # k by batch size and adaptive verification: refused here, not by every cell's server
        sd_config.controls(cfg)
    except sd_config.SpecError as e:
        fail(where, "speculative_config's " + str(e).removeprefix("--speculative-config: "))
    return dict(cfg)


def _variant(where: str, engine: str, name: str, raw: object) -> Variant:
    vwhere = f"{where} variant {name!r}"
    declared = keys(Variant)
    only = f"a variant takes only {', '.join(sorted(declared))}"
    if not isinstance(raw, dict):
        fail(vwhere, only)
    check(vwhere, raw, declared, unknown=only)
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        fail(vwhere, "variant names are letters, digits, '-', '_' and '.'")
    spec = None
    if "spec" in raw:
        if engine != "llama.cpp":
            fail(vwhere, "spec is llama.cpp's; a vLLM variant takes speculative_config")
        try:
            spec = llamacpp.check_spec(vwhere, raw["spec"])
        except llamacpp.LlamaCppError as e:
            raise DeploymentError(f"deployment {e}") from None
    elif engine == "llama.cpp" and "speculative_config" in raw:
        fail(vwhere, "a llama.cpp variant takes spec = { type = ..., draft_n_max = ... }, not speculative_config")
    return Variant(name, _spec(vwhere, raw.get("speculative_config")), tuple(raw.get("args", ())), raw.get("url"), spec)


def _build(name: str, source: str, raw: dict) -> Deployment:
    """The deployment a file declares: its keys checked against the declared model, its
    variants, then the rules across keys and what its engine needs (render/ENGINE.check)."""
    where = repr(source)
    check(where, raw, keys(Deployment))
    if not raw.get("variants"):
        fail(where, "needs at least one [variants.NAME] table")
    engine = raw.get("engine", "vllm")
    variants = {vname: _variant(where, engine, vname, v) for vname, v in raw["variants"].items()}
    given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k != "variants"}
    dep = Deployment(name=name, source=source, variants=variants, **given)
    bad = [k for k, v in dep.env.items() if not isinstance(v, str)]
    if bad:
        fail(where, f'env values are strings, like VLLM_CPU_KVCACHE_SPACE = "2"; not {", ".join(bad)}')
    for key, value in dep.env.items():
        try:
            machine.check(key, value)
        except DeploymentError as e:
            fail(where, str(e))
    for v in variants.values():
        for m in (dep.model, (v.speculative_config or {}).get("model")):
            known = not localmodels.is_local(m) or str(m).removeprefix(localmodels.PREFIX) in localmodels.MODELS
            if not known:
                fail(
                    where, f"no local model {m!r}: loadgen writes {', '.join(localmodels.MODELS)} (servers/localmodels)"
                )
    served = dep.served_model_name or (dep.model.removeprefix(localmodels.PREFIX))
    dep = replace(dep, served_model_name=served, startup_timeout_s=float(dep.startup_timeout_s))
    for v in variants.values():  # vLLM refuses per-request SD metrics without speculative decoding
        if v.speculative_config is None and "--per-request-spec-decode-metrics" in dep.args + v.args:
            fail(
                where,
                f"variant {v.name!r} has no speculative_config, and vLLM refuses "
                "--per-request-spec-decode-metrics without one: give the flag in the SD variants' args",
            )
    BY_ENGINE[dep.engine].check(dep, where)
    return dep


def acceptance_variant(template: str, length: float) -> str:
    """The name of `template` run at synthetic acceptance length `length`."""
    return f"{template}-al{length:g}"


def with_acceptance_lengths(dep: Deployment, templates: list[str], lengths: list[float]) -> Deployment:
    """`dep` plus, for every SD variant in `templates` and every acceptance length, that variant
    with vLLM's synthetic acceptance pinned to the length (rejection_sample_method "synthetic",
    synthetic_acceptance_length), named acceptance_variant(template, length)."""
    variants = dict(dep.variants)
    for t in templates:
        v = dep.variants.get(t)
        if v is None or v.speculative_config is None:
            raise DeploymentError(
                f"--acceptance-lengths needs speculative-decoding variants to pin; {t!r} "
                f"{'has none' if v is not None else 'is not in deployment ' + repr(dep.name)}"
            )
        k = v.speculative_config["num_speculative_tokens"]
        for length in lengths:
            if not 1.0 <= length <= k + 1:
                raise DeploymentError(
                    f"--acceptance-lengths {length:g}: variant {t!r} proposes {k} drafts, so "
                    f"its acceptance length is in [1, {k + 1}] (vLLM's bounds)"
                )
            cfg = {
                key: val
                for key, val in v.speculative_config.items()
                if key not in ("rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length")
            }
            cfg.update(rejection_sample_method="synthetic", synthetic_acceptance_length=float(length))
            name = acceptance_variant(t, length)
            variants[name] = replace(v, name=name, speculative_config=cfg)
    return replace(dep, variants=variants)


def default_port(engine: str) -> int | None:
    """Where a server of `engine` listens unless told: vLLM's default port; None for the
    others (the emulator and llama.cpp take a free port when started)."""
    return BY_ENGINE[engine].PORT


def render(
    dep: Deployment,
    variant: str,
    *,
    port: int = VLLM_PORT,
    gpus: tuple[int, ...] | None = None,
    host: str = "127.0.0.1",
    llama_server: str | None = None,
) -> Launch:
    """The server for `variant` as its engine runs it (servers/deployments/render/): `vllm
    serve` with vLLM's flags, the emulator with the same flags, llama-server, or an external
    server's URL; on `port` and `gpus` (default: the first tensor_parallel_size devices)."""
    if variant not in dep.variants:
        raise DeploymentError(f"deployment {dep.name!r} has no variant {variant!r}; it has {', '.join(dep.variants)}")
    la = BY_ENGINE[dep.engine].render(
        dep, dep.variants[variant], port=port, gpus=gpus, host=host, llama_server=llama_server
    )
    if not la.argv:
        return la
    env = {**la.env, **dep.env}
    return replace(la, env={k: machine.expand(k, v) for k, v in env.items()})
