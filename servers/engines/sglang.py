"""SGLang: `python -m sglang.launch_server --model-path M --served-model-name N --host --port
--tp-size --enable-metrics [--max-running-requests] [speculative flags] [args]`, on its GPUs
(../shared/reference/sglang.md). A variant's speculative decoding is its `speculative` table,
each key SGLang's `--speculative-KEY` flag:

    speculative = { algorithm = "EAGLE3", draft_model_path = "...", num_steps = 3,
                    eagle_topk = 1, num_draft_tokens = 4 }
        -> --speculative-algorithm EAGLE3 --speculative-draft-model-path ... --speculative-num-steps 3
           --speculative-eagle-topk 1 --speculative-num-draft-tokens 4

`num_draft_tokens` is what one step verifies, the drafts and the token before them (SGLang's
per-request accounting counts num_draft_tokens - 1 drafts a step: tokenizer_manager's
spec_num_proposed_drafts), so it is vLLM's num_speculative_tokens + 1 for a chain (eagle_topk 1).
tests/test_sglang.py passes every rendered command through SGLang's own parser
(`sglang.srt.server_args.prepare_server_args`, where the wheel imports).

Its dialect: metrics (with --enable-metrics) counters `sglang:prompt_tokens_total`,
`sglang:generation_tokens_total`, `sglang:spec_verify_calls_total` (verification steps) and
`sglang:num_requests_total`, each added to as a request finishes (a window's SD figures come from
these: `window_sd`), gauges `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage`
and, whole-server averages that a window cannot difference, `sglang:spec_accept_length` and
`sglang:spec_accept_rate`. Per request, asked with `return_spec_tokens_details`, a chunk with
no choices carries `sglext.spec_tokens_details` {spec_num_proposed_drafts,
spec_num_correct_drafts, spec_verify_ct, ...}: loadgen reads those into the same per-request
figures as vLLM's (draft tokens, accepted drafts, steps).

The emulator serves an SGLang deployment (`--engine emulator`) with each variant's method in
vLLM's words and `--flavor sglang`, which makes it answer in this dialect: SGLang's metric
names, /v1/models' owned_by and per-request details (`emulated`)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace

from servers import localmodels
from servers.deploy import schema
from servers.deploy.model import Deployment, Launch, Variant
from servers.deploy.schema import DeploymentError, fail
from servers.engines import vllm
from servers.engines.base import Base, register
from servers.engines.dialect import Counts, Dialect, Metrics, RequestSD, sd_figures, speak

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE", "SUFFIX", "DFLASH")
# key -> its type; each renders as --speculative-KEY (dashes), a true bool as the bare flag
KEYS: dict[str, type] = {
    "algorithm": str,
    "draft_model_path": str,
    "num_steps": int,
    "eagle_topk": int,
    "num_draft_tokens": int,
    "adaptive": bool,
}
# SGLang's method -> vLLM's (what the emulator serves)
AS_VLLM = {
    "EAGLE": "eagle",
    "EAGLE3": "eagle3",
    "NEXTN": "mtp",
    "NGRAM": "ngram",
    "STANDALONE": "draft_model",
    "SUFFIX": "suffix",
}
NEEDS_DRAFT_MODEL = ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH")
# SGLang's flags with an equivalent among the emulator's (vLLM's)
ARGS_AS_VLLM = {"--disable-radix-cache": ("--no-enable-prefix-caching",)}
EXAMPLE = '{ algorithm = "NGRAM", num_draft_tokens = 4 }'

METRICS = Metrics(
    counters={
        "prompt_tokens": ("sglang:prompt_tokens_total",),
        "generation_tokens": ("sglang:generation_tokens_total",),
        "requests": ("sglang:num_requests_total",),
        "spec_verify_calls": ("sglang:spec_verify_calls_total",),
    },
    gauges={
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_usage": ("sglang:token_usage",),
        "spec_accept_length": ("sglang:spec_accept_length",),
        "spec_accept_rate": ("sglang:spec_accept_rate",),
    },
    histograms={
        "ttft": ("sglang:time_to_first_token_seconds",),
        "itl": ("sglang:inter_token_latency_seconds",),
        "e2e": ("sglang:e2e_request_latency_seconds",),
    },
)


def details(c) -> dict:
    """SGLang's `spec_tokens_details` (its tokenizer_manager): every verify call proposes
    num_draft_tokens - 1 drafts (k), whatever the drafter found; accept length = completion
    tokens / verify calls, accept rate = correct / proposed, and how many steps accepted 0, 1,
    ... drafts."""
    steps = c["steps"]
    proposed = steps * c["k"]
    return {
        "spec_num_proposed_drafts": proposed,
        "spec_accept_rate": c["accepted"] / proposed if proposed else 0.0,
        "spec_accept_length": c["emitted"] / steps if steps else 0.0,
        "spec_correct_drafts_histogram": list(c["histogram"]),
    }


REQUEST_SD = RequestSD(
    "spec_num_proposed_drafts",
    "spec_num_correct_drafts",
    "spec_verify_ct",
    path=("sglext", "spec_tokens_details"),
    alone=True,
    more=details,
)


def window_sd(c: Counts) -> dict | None:
    """SGLang counts verification calls, not drafts: every decoding step is one, and emits one
    token plus the drafts it accepted, after the prefill's one token a request. So over a window
    of whole requests: accepted drafts = generated - verify calls - requests finished. It counts
    no draft tokens (its acceptance rate is a whole-server gauge a window cannot difference), so
    the window has no acceptance rate. Drafts accepted past a request's end (max_tokens cut its
    last step) are not among the tokens generated, so not counted here (they are in the
    per-request details)."""
    if not c.present("spec_verify_calls"):
        return None
    steps = c.total("spec_verify_calls")
    accepted = max(0.0, c.total("generation_tokens") - steps - c.total("requests"))
    return sd_figures(c.seconds, steps, None, accepted, past_end_counted=False)


DIALECT = speak(
    Dialect(
        "sglang",
        owned_by="sglang",
        request_fields={"return_spec_tokens_details": True},
        metrics=METRICS,
        request_sd=REQUEST_SD,
        window_sd=window_sd,
    )
)


def check_speculative(where: str, spec: object) -> dict:
    if not isinstance(spec, dict):
        fail(where, f"speculative must be a table, like {EXAMPLE}")
    unknown = sorted(set(spec) - set(KEYS))
    if unknown:
        fail(where, f"speculative keys are {', '.join(KEYS)}; not {', '.join(unknown)}")
    for k, v in spec.items():
        bad_int = KEYS[k] is int and (isinstance(v, bool) or not isinstance(v, int) or v < 1)
        if bad_int or not isinstance(v, KEYS[k]):
            fail(where, f"speculative {k} must be {'an integer >= 1' if KEYS[k] is int else 'a ' + KEYS[k].__name__}")
    algorithm = spec.get("algorithm")
    if algorithm not in ALGORITHMS:
        fail(where, f"speculative algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    if algorithm in NEEDS_DRAFT_MODEL and "draft_model_path" not in spec:
        fail(where, f"speculative algorithm {algorithm} needs draft_model_path")
    if "num_draft_tokens" not in spec:
        fail(where, f"speculative needs num_draft_tokens (the tokens one step verifies), like {EXAMPLE}")
    return dict(spec)


def speculative_flags(spec: dict | None) -> list[str]:
    out: list[str] = []
    for k in KEYS:
        if spec is None or k not in spec:
            continue
        flag, value = "--speculative-" + k.replace("_", "-"), spec[k]
        if KEYS[k] is bool:
            out += [flag] if value else []
        else:
            out += [flag, localmodels.resolve(value) if k == "draft_model_path" else str(value)]
    return out


def as_vllm(where: str, spec: dict | None) -> dict | None:
    """The variant's speculative decoding as vLLM's --speculative-config (what the emulator
    serves); DeploymentError for what the emulator has no equivalent of."""
    if spec is None:
        return None
    algorithm = spec["algorithm"]
    if algorithm not in AS_VLLM:
        raise DeploymentError(f"{where}: the emulator has no {algorithm} drafter; run it on sglang")
    if spec.get("eagle_topk", 1) != 1:
        raise DeploymentError(f"{where}: the emulator drafts a chain (eagle_topk 1), not a tree; run it on sglang")
    if spec.get("adaptive"):
        raise DeploymentError(f"{where}: the emulator has no SGLang adaptive speculation; run it on sglang")
    cfg: dict = {"method": AS_VLLM[algorithm], "num_speculative_tokens": spec["num_draft_tokens"] - 1}
    if "draft_model_path" in spec:
        cfg["model"] = spec["draft_model_path"]
    if cfg["num_speculative_tokens"] < 1:
        raise DeploymentError(f"{where}: num_draft_tokens {spec['num_draft_tokens']} verifies no draft")
    return cfg


def _args_as_vllm(where: str, args: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for a in args:
        if a not in ARGS_AS_VLLM:
            raise DeploymentError(
                f"{where}: the emulator has no equivalent of SGLang's {a} (it knows {', '.join(ARGS_AS_VLLM)}); "
                "drop it or run on sglang"
            )
        out += ARGS_AS_VLLM[a]
    return tuple(out)


@register
class Sglang(Base):
    name = "sglang"
    flags = "sglang"
    port = 30000  # SGLang's own default
    resource = "GPU"
    tool = "sglang"
    dialect = DIALECT.name
    variant_keys = {"speculative": schema.Key(dict, example=EXAMPLE)}
    packages = ("sglang",)

    def check_variant(self, where: str, raw: dict) -> None:
        if "speculative_config" in raw:
            fail(where, f"an sglang variant takes speculative = {EXAMPLE}, not vLLM's speculative_config")
        if "speculative" in raw:
            check_speculative(where, raw["speculative"])

    def method(self, v: Variant) -> str | None:
        spec = v.own.get("speculative")
        return None if spec is None else AS_VLLM.get(spec["algorithm"], spec["algorithm"].lower())

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None) -> Launch:
        given = executable or dep.executable
        argv = shlex.split(given) if given else [sys.executable, "-m", "sglang.launch_server"]
        argv += ["--model-path", localmodels.resolve(dep.model), "--served-model-name", dep.served_model_name]
        argv += ["--host", host, "--port", str(port), "--tp-size", str(dep.tensor_parallel_size), "--enable-metrics"]
        if dep.max_num_seqs is not None:
            argv += ["--max-running-requests", str(dep.max_num_seqs)]
        argv += [*speculative_flags(v.own.get("speculative")), *dep.args, *v.args]
        return Launch(
            dep.name,
            v.name,
            self.name,
            tuple(argv),
            {"CUDA_VISIBLE_DEVICES": ",".join(map(str, vllm.gpus_for(dep, gpus)))},
            f"http://{host}:{port}",
            dep.served_model_name,
            dep.startup_timeout_s,
            vllm.locals_among(dep.model, (v.own.get("speculative") or {}).get("draft_model_path")),
        )

    def install_problem(self, dep: Deployment, executable: str | None) -> str | None:
        import importlib.util

        if not (executable or dep.executable) and importlib.util.find_spec("sglang") is None:
            return (
                f"deployment {dep.name!r} runs SGLang, which is not installed here; install it "
                "(pip install sglang, on a GPU host), set executable in the deployment file, or try it on "
                "--engine emulator"
            )
        return None

    def emulated(self, dep: Deployment) -> Deployment:
        """Each variant's method in vLLM's words, SGLang's flags with an equivalent translated
        (any other refused), and the emulator answering as SGLang (`--flavor sglang`)."""
        where = f"deployment {dep.name!r}"
        variants = {
            name: replace(
                v,
                speculative_config=as_vllm(f"{where} variant {name!r}", v.own.get("speculative")),
                args=_args_as_vllm(f"{where} variant {name!r}", v.args),
                own={},
            )
            for name, v in dep.variants.items()
        }
        return replace(
            dep,
            variants=variants,
            args=_args_as_vllm(where, dep.args),
            emulator_args=(*dep.emulator_args, "--flavor", DIALECT.name),
        )
