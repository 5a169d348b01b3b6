"""The deployment catalog (`servers/deployments/*.toml`, or any file of that shape).

    description = "..."
    model = "meta-llama/Llama-3.1-8B-Instruct"
    served_model_name = "..."        # default: model
    tensor_parallel_size = 1         # GPUs per server (CUDA_VISIBLE_DEVICES)
    max_num_seqs = 256               # optional
    engine = "vllm"                  # one of servers/engines: vllm | vllm-cpu | emulator | sglang | external | ...
    executable = "vllm"              # the server command, if not the engine's own found on PATH
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

An engine may declare keys of its own, for the deployment and for its variants (llama.cpp's
GGUF file and a variant's `spec` table, SGLang's `speculative` table, vLLM CPU's `dtype_by_cpu =
{ avx512_bf16 = "bfloat16", default = "float32" }`: each engine's module in
servers/engines/ says them); they are checked as the common keys are and kept in `own`.

The common keys are declared with the dataclasses they fill (servers/deploy/model.py) and a
file is checked against that declaration (schema.py); what an engine needs beyond them, and its
command line, is its module's in servers/engines/.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from servers import engines, localmodels
from servers.deploy import machine
from servers.deploy.model import METHODS, Deployment, Launch, Variant
from servers.deploy.schema import DeploymentError, check, fail, keys
from servers.emulator import spec as sd_config

__all__ = ["Deployment", "DeploymentError", "Launch", "Variant", "engine_names"]

HERE = Path(__file__).resolve().parent


def engine_names() -> tuple[str, ...]:
    """The engines a deployment may name (servers/engines' registry)."""
    return engines.names()


def _engine(where: str, name: object) -> engines.Engine:
    try:
        return engines.get(str(name))
    except engines.UnknownEngine as e:
        fail(where, str(e))


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


def _variant(where: str, engine: engines.Engine, name: str, raw: object) -> Variant:
    vwhere = f"{where} variant {name!r}"
    declared = {**keys(Variant), **engine.variant_keys}
    only = f"a variant takes only {', '.join(sorted(declared))}"
    if not isinstance(raw, dict):
        fail(vwhere, only)
    foreign = sorted(
        (k, e.name) for e in engines.REGISTRY.values() if e is not engine for k in e.variant_keys if k in raw
    )
    if foreign and foreign[0][0] not in declared:
        k, owner = foreign[0]
        fail(vwhere, f"{k} is {owner}'s; a {engine.name} variant takes {', '.join(sorted(declared))}")
    check(vwhere, raw, declared, unknown=only)
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        fail(vwhere, "variant names are letters, digits, '-', '_' and '.'")
    engine.check_variant(vwhere, raw)
    own = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items() if k in engine.variant_keys}
    return Variant(name, _spec(vwhere, raw.get("speculative_config")), tuple(raw.get("args", ())), raw.get("url"), own)


def _build(name: str, source: str, raw: dict) -> Deployment:
    """The deployment a file declares: its keys checked against the declared model, its
    variants, then the rules across keys and what its engine needs (render/ENGINE.check)."""
    where = repr(source)
    engine = _engine(where, raw.get("engine", engines.file_default()))
    check(where, raw, {**keys(Deployment), **engine.deployment_keys})
    if not raw.get("variants"):
        fail(where, "needs at least one [variants.NAME] table")
    variants = {vname: _variant(where, engine, vname, v) for vname, v in raw["variants"].items()}
    given: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in raw.items()
        if k != "variants" and k not in engine.deployment_keys
    }
    own = {k: v for k, v in raw.items() if k in engine.deployment_keys}
    given["engine"] = engine.name
    dep = Deployment(name=name, source=source, variants=variants, own=own, **given)
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
    engine.check(dep, where)
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


def on_engine(dep: Deployment, engine: str | None) -> Deployment:
    """`dep` served by `engine`: one that takes its variants' flags, the emulator (for vLLM's
    flags, or an engine that says how it emulates its own: its `emulated`), or one that starts
    nothing (external)."""
    if engine is None or engine == dep.engine:
        return dep
    try:
        target, source = engines.get(engine), engines.get(dep.engine)
    except engines.UnknownEngine as e:
        raise DeploymentError(str(e)) from None
    if target.emulates:
        return replace(source.emulated(dep), engine=engine)
    if None not in (target.flags, source.flags) and target.flags != source.flags:
        raise DeploymentError(
            f"deployment {dep.name!r} is for {dep.engine}; it cannot run on {engine} "
            f"({source.flags}'s flags and {target.flags}'s differ)"
        )
    return replace(dep, engine=engine)


def default_port(engine: str) -> int | None:
    """Where a server of `engine` listens unless told: the engine's own default (vLLM's
    8000); None for the others (a free port when started)."""
    return engines.get(engine).port


def render(
    dep: Deployment,
    variant: str,
    *,
    port: int | None = None,
    gpus: tuple[int, ...] | None = None,
    host: str = "127.0.0.1",
    executable: str | None = None,
) -> Launch:
    """The server for `variant` as its engine runs it (servers/engines/): on `port` (default:
    the engine's own, else 8000) and `gpus` (default: the first tensor_parallel_size devices),
    with `executable` in place of the deployment's server command where given."""
    if variant not in dep.variants:
        raise DeploymentError(f"deployment {dep.name!r} has no variant {variant!r}; it has {', '.join(dep.variants)}")
    engine = engines.get(dep.engine)
    port = port if port is not None else (engine.port or 8000)
    la = engine.render(dep, dep.variants[variant], port=port, gpus=gpus, host=host, executable=executable)
    if not la.argv:
        return la
    env = {**la.env, **dep.env}
    return replace(la, env={k: machine.expand(k, v) for k, v in env.items()})
