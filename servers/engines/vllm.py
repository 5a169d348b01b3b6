"""vLLM on GPUs: `vllm serve MODEL` with the deployment's and the variant's flags, on its GPUs
(CUDA_VISIBLE_DEVICES); its metrics are `vllm:` (../shared/reference/vllm.md), its per-request
SD counts `metrics.speculative_decoding` (with --per-request-spec-decode-metrics)."""

from __future__ import annotations

import json
import shutil

from servers import localmodels, vllm_cpu
from servers.deploy.model import Deployment, Launch, Variant
from servers.deploy.schema import DeploymentError
from servers.engines.base import Base, register
from servers.engines.dialect import Dialect, Metrics, RequestSD, drafts_counted, speak

METRICS = Metrics(
    counters={
        "prompt_tokens": ("vllm:prompt_tokens_total",),
        "generation_tokens": ("vllm:generation_tokens_total",),
        "preemptions": ("vllm:num_preemptions_total",),
        "request_success": ("vllm:request_success_total",),  # by finished_reason
        "prefix_cache_queries": ("vllm:prefix_cache_queries_total",),
        "prefix_cache_hits": ("vllm:prefix_cache_hits_total",),
        "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
        "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
        "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
        "spec_accepted_per_pos": ("vllm:spec_decode_num_accepted_tokens_per_pos_total",),  # by position
    },
    gauges={
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # renamed in 0.9-0.11
    },
    histograms={
        "ttft": ("vllm:time_to_first_token_seconds",),
        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),  # renamed in 0.11
        "tpot": ("vllm:request_time_per_output_token_seconds",),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
        "prefill": ("vllm:request_prefill_time_seconds",),
        "decode": ("vllm:request_decode_time_seconds",),
        "iteration_tokens": ("vllm:iteration_tokens_total",),  # a histogram whose name ends in _total
    },
)
REQUEST_SD = RequestSD(
    "num_draft_tokens",
    "num_accepted_draft_tokens",
    "num_spec_steps",
    "per_step_accepted",
    path=("metrics", "speculative_decoding"),  # on the usage chunk, with --per-request-spec-decode-metrics
)


DIALECT = speak(Dialect("vllm", owned_by="vllm", metrics=METRICS, request_sd=REQUEST_SD, window_sd=drafts_counted))


def gpus_for(dep: Deployment, gpus: tuple[int, ...] | None) -> tuple[int, ...]:
    gpus = tuple(range(dep.tensor_parallel_size)) if gpus is None else tuple(gpus)
    if len(gpus) != dep.tensor_parallel_size:
        raise DeploymentError(
            f"deployment {dep.name!r} needs {dep.tensor_parallel_size} GPUs per server, given {len(gpus)}"
        )
    return gpus


def flags(dep: Deployment, v: Variant, port: int, host: str) -> list[str]:
    """vLLM's flags for the variant (the emulator takes the same); a `local:NAME` model as the
    directory loadgen makes it in (servers/localmodels)."""
    out = [
        localmodels.resolve(dep.model),
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
        out += ["--max-num-seqs", str(dep.max_num_seqs)]
    out += [*dep.args, *v.args]
    if v.speculative_config is not None:
        cfg = dict(v.speculative_config)
        if localmodels.is_local(cfg.get("model")):
            cfg["model"] = localmodels.resolve(cfg["model"])
        out += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return out


def local_models(dep: Deployment, v: Variant) -> tuple[tuple[str, str], ...]:
    """The `local:NAME` models the variant's server reads, (name, directory) each, for the
    launcher to make before it starts."""
    return locals_among(dep.model, (v.speculative_config or {}).get("model"))


def locals_among(*names: object) -> tuple[tuple[str, str], ...]:
    """Of these model names, the `local:NAME` ones, (name, directory) each, once."""
    return tuple(
        (n, localmodels.resolve(n)) for n in dict.fromkeys(names) if isinstance(n, str) and localmodels.is_local(n)
    )


@register
class Vllm(Base):
    name = "vllm"
    port = 8000  # vLLM's own default: a server started for loadgen is where its users expect it
    resource = "GPU"
    tool = "vllm"
    dialect = DIALECT.name
    file_default = True
    packages = ("vllm",)

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None) -> Launch:
        return Launch(
            dep.name,
            v.name,
            self.name,
            (executable or dep.executable or "vllm", "serve", *flags(dep, v, port, host)),
            {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus_for(dep, gpus)))},
            f"http://{host}:{port}",
            dep.served_model_name,
            dep.startup_timeout_s,
            local_models(dep, v),
        )

    def install_problem(self, dep: Deployment, executable: str | None) -> str | None:
        exe = executable or dep.executable
        if shutil.which(exe or "vllm") is None:
            return (
                f"deployment {dep.name!r} runs {exe or 'vllm'!r}, which is not installed "
                "here; install vLLM (or set executable in the deployment file), or try it on "
                "--engine emulator"
            )
        if not exe and vllm_cpu.installed() and not vllm_cpu.gpu():
            return (
                f"deployment {dep.name!r} is for vLLM on a GPU, and the vllm here is its CPU build on a "
                "machine without one; sweep a vllm-cpu deployment (tiny-llama-vllm-cpu, "
                'gemma-3-270m-vllm-cpu; or engine = "vllm-cpu" in the file), or try it on --engine emulator'
            )
        return None
