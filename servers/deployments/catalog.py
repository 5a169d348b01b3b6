"""The deployment catalog (`servers/deployments/*.toml`, or any file of that shape).

    description = "..."
    model = "meta-llama/Llama-3.1-8B-Instruct"
    served_model_name = "..."        # default: model
    tensor_parallel_size = 1         # GPUs per server (CUDA_VISIBLE_DEVICES)
    max_num_seqs = 256               # optional
    engine = "vllm"                  # vllm | emulator | external
    executable = "vllm"              # the server command, if not on PATH as `vllm` (`llama-server`)
    url = "http://host:8000"         # engine external: the running server (or per variant)
    args = ["--no-enable-prefix-caching"]   # more flags for every variant
    emulator_args = ["--time-scale", "1"]   # flags only the emulator takes
    startup_timeout_s = 900

    [variants.eagle]
    speculative_config = { method = "eagle", model = "...", num_speculative_tokens = 3 }
    args = []                        # more flags for this variant
    url = "..."                      # engine external

engine = "llama.cpp" runs llama.cpp's `llama-server` instead (servers/deployments/llamacpp.py):
`model` is then the served name (--alias), `model_file` the GGUF (a path, or a packaged model
such as "gemma3-270m"), `slots` (-np), `context` (-c, shared by the slots), `threads` (-t), and
a variant's speculative decoding is a `spec` table (type, draft_n_max, draft_n_min, ngram_lookup,
ngram_min_hits, draft_model, synth_rates).
"""

from __future__ import annotations

import json
import shlex
import sys
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NoReturn

from servers.deployments import llamacpp

HERE = Path(__file__).resolve().parent
ENGINES = ("vllm", "emulator", "external", "llama.cpp")
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
_TOP = {
    "description",
    "model",
    "served_model_name",
    "tensor_parallel_size",
    "max_num_seqs",
    "engine",
    "executable",
    "url",
    "args",
    "emulator_args",
    "startup_timeout_s",
    "variants",
    "model_file",
    "slots",
    "context",
    "threads",
}
_VARIANT = {"speculative_config", "spec", "args", "url"}


class DeploymentError(ValueError):
    pass


@dataclass(frozen=True)
class Variant:
    name: str
    speculative_config: dict | None = None  # vLLM's --speculative-config
    args: tuple[str, ...] = ()
    url: str | None = None
    spec: dict | None = None  # llama.cpp's speculative decoding

    @property
    def method(self) -> str | None:
        if self.spec is not None:
            return self.spec["type"]
        return None if self.speculative_config is None else self.speculative_config.get("method")


@dataclass(frozen=True)
class Deployment:
    name: str
    source: str
    description: str
    model: str
    served_model_name: str
    tensor_parallel_size: int
    max_num_seqs: int | None
    engine: str
    executable: str | None  # None: `vllm`, or llama-server found by llamacpp.find_server
    url: str | None
    args: tuple[str, ...]
    emulator_args: tuple[str, ...]
    startup_timeout_s: float
    variants: dict[str, Variant] = field(default_factory=dict)
    model_file: str | None = None  # llama.cpp
    slots: int = 1
    context: int | None = None
    threads: int | None = None

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


def _fail(where: str, what: str) -> NoReturn:
    raise DeploymentError(f"deployment {where}: {what}")


def _strings(where: str, key: str, v) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(a, str) for a in v):
        _fail(where, f'{key} must be a list of strings, like ["--enforce-eager"]')
    return tuple(v)


def _spec(where: str, cfg) -> dict | None:
    if cfg is None:
        return None
    if not isinstance(cfg, dict):
        _fail(where, 'speculative_config must be a table, like { method = "ngram", num_speculative_tokens = 3 }')
    method = cfg.get("method")
    if method is not None and method not in METHODS:
        _fail(where, f"speculative_config method {method!r} is not one of {', '.join(METHODS)}")
    if method is None and "model" not in cfg:
        _fail(where, "speculative_config needs a method (or a draft model)")
    k = cfg.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        _fail(where, "speculative_config needs num_speculative_tokens, an integer >= 1")
    return dict(cfg)


def _build(name: str, source: str, raw: dict) -> Deployment:
    where = repr(source)
    unknown = set(raw) - _TOP
    if unknown:
        _fail(where, f"unknown keys {', '.join(sorted(unknown))} (known: {', '.join(sorted(_TOP))})")
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        _fail(where, 'needs model = "org/name"')
    tp = raw.get("tensor_parallel_size", 1)
    if not isinstance(tp, int) or tp < 1:
        _fail(where, "tensor_parallel_size must be an integer >= 1")
    seqs = raw.get("max_num_seqs")
    if seqs is not None and (not isinstance(seqs, int) or seqs < 1):
        _fail(where, "max_num_seqs must be an integer >= 1")
    engine = raw.get("engine", "vllm")
    if engine not in ENGINES:
        _fail(where, f"engine {engine!r}: use one of {', '.join(ENGINES)}")
    variants_raw = raw.get("variants")
    if not isinstance(variants_raw, dict) or not variants_raw:
        _fail(where, "needs at least one [variants.NAME] table")
    variants = {}
    for vname, v in variants_raw.items():
        vwhere = f"{where} variant {vname!r}"
        if not isinstance(v, dict) or set(v) - _VARIANT:
            _fail(vwhere, f"a variant takes only {', '.join(sorted(_VARIANT))}")
        if not vname.replace("-", "").replace("_", "").replace(".", "").isalnum():
            _fail(vwhere, "variant names are letters, digits, '-', '_' and '.'")
        spec = None
        if "spec" in v:
            if engine != "llama.cpp":
                _fail(vwhere, "spec is llama.cpp's; a vLLM variant takes speculative_config")
            try:
                spec = llamacpp.check_spec(vwhere, v["spec"])
            except llamacpp.LlamaCppError as e:
                raise DeploymentError(f"deployment {e}") from None
        elif engine == "llama.cpp" and "speculative_config" in v:
            _fail(vwhere, "a llama.cpp variant takes spec = { type = ..., draft_n_max = ... }, not speculative_config")
        variants[vname] = Variant(
            vname,
            _spec(vwhere, v.get("speculative_config")),
            _strings(vwhere, "args", v.get("args", [])),
            v.get("url"),
            spec,
        )
    dep = Deployment(
        name=name,
        source=source,
        description=str(raw.get("description", "")),
        model=model,
        served_model_name=raw.get("served_model_name", model),
        tensor_parallel_size=tp,
        max_num_seqs=seqs,
        engine=engine,
        executable=raw.get("executable"),
        url=raw.get("url"),
        args=_strings(where, "args", raw.get("args", [])),
        emulator_args=_strings(where, "emulator_args", raw.get("emulator_args", [])),
        startup_timeout_s=float(raw.get("startup_timeout_s", 900)),
        variants=variants,
        model_file=raw.get("model_file"),
        slots=raw.get("slots", 1),
        context=raw.get("context"),
        threads=raw.get("threads"),
    )
    for v in variants.values():  # vLLM refuses per-request SD metrics without speculative decoding
        if v.speculative_config is None and "--per-request-spec-decode-metrics" in dep.args + v.args:
            _fail(
                where,
                f"variant {v.name!r} has no speculative_config, and vLLM refuses "
                "--per-request-spec-decode-metrics without one: give the flag in the SD variants' args",
            )
    if engine == "llama.cpp":
        if not isinstance(dep.model_file, str) or not dep.model_file:
            _fail(
                where,
                'engine llama.cpp needs model_file = "/path/model.gguf" (or a packaged model: '
                + ", ".join(llamacpp.PACKAGED)
                + ")",
            )
        for key in ("slots", "context", "threads"):
            v = getattr(dep, key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                _fail(where, f"{key} must be an integer >= 1")
    if engine == "external":
        missing = [v.name for v in variants.values() if not (v.url or dep.url)]
        if missing:
            _fail(
                where,
                f"engine external needs url (for the deployment or each variant); missing for {', '.join(missing)}",
            )
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


VLLM_PORT = 8000  # vLLM's own default: a server started for loadgen is where its users expect it


def default_port(engine: str) -> int | None:
    """Where a server of `engine` listens unless told: vLLM's default port; None for the
    others (the emulator and llama.cpp take a free port when started)."""
    return VLLM_PORT if engine == "vllm" else None


def render(
    dep: Deployment,
    variant: str,
    *,
    port: int = VLLM_PORT,
    gpus: tuple[int, ...] | None = None,
    host: str = "127.0.0.1",
    llama_server: str | None = None,
) -> Launch:
    """The server for `variant`: `vllm serve` with vLLM's flags, or the emulator with the same
    flags, on `port` and `gpus` (default: the first tensor_parallel_size devices)."""
    if variant not in dep.variants:
        raise DeploymentError(f"deployment {dep.name!r} has no variant {variant!r}; it has {', '.join(dep.variants)}")
    v = dep.variants[variant]
    if dep.engine == "external":
        return Launch(
            dep.name,
            variant,
            "external",
            (),
            {},
            str(v.url or dep.url).rstrip("/"),  # an external deployment has one (checked when read)
            dep.served_model_name,
            dep.startup_timeout_s,
        )
    if dep.engine == "llama.cpp":
        return _render_llamacpp(dep, v, port, host, llama_server)
    gpus = tuple(range(dep.tensor_parallel_size)) if gpus is None else tuple(gpus)
    if len(gpus) != dep.tensor_parallel_size:
        raise DeploymentError(
            f"deployment {dep.name!r} needs {dep.tensor_parallel_size} GPUs per server, given {len(gpus)}"
        )
    flags = [
        dep.model,
        "--host",
        host,
        "--port",
        str(port),
        "--tensor-parallel-size",
        str(dep.tensor_parallel_size),
        "--served-model-name",
        dep.served_model_name,
    ]
    if dep.max_num_seqs is not None:
        flags += ["--max-num-seqs", str(dep.max_num_seqs)]
    flags += [*dep.args, *v.args]
    if v.speculative_config is not None:
        flags += ["--speculative-config", json.dumps(v.speculative_config, separators=(",", ":"))]
    if dep.engine == "vllm":
        argv = (dep.executable or "vllm", "serve", *flags)
    else:
        argv = (sys.executable, "-m", "servers.emulator", "serve", *flags, *dep.emulator_args)
    return Launch(
        dep.name,
        variant,
        dep.engine,
        argv,
        {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))},
        f"http://{host}:{port}",
        dep.served_model_name,
        dep.startup_timeout_s if dep.engine == "vllm" else 60.0,
    )


def _render_llamacpp(dep: Deployment, v: Variant, port: int, host: str, llama_server: str | None) -> Launch:
    """`llama-server -m GGUF --alias NAME --host --port -np -c -t --metrics [spec flags] [args]`;
    on CPU, so no GPU assignment."""
    try:
        model, packaged = llamacpp.model_path(dep.model_file or "")  # checked when read: llama.cpp has one
        spec, needs = llamacpp.spec_flags(v.spec)
    except llamacpp.LlamaCppError as e:
        raise DeploymentError(f"deployment {dep.name!r}: {e}") from None
    wanted = llama_server or dep.executable
    exe = llamacpp.find_server(wanted) or wanted or "llama-server"
    argv = [
        exe,
        "-m",
        model,
        "--alias",
        dep.served_model_name,
        "--host",
        host,
        "--port",
        str(port),
        "-np",
        str(dep.slots),
    ]
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
        min(dep.startup_timeout_s, 300.0),
        prepare + tuple(needs),
    )
