"""The commands' options as typed models: what the library takes (loadgen.api's job builders)
and the command line builds from its flags (loadgen/cli/options.py, one field per flag of the
same name). A job made in Python and one made by the CLI are checked by the same code. The
load shape's options are the shape family's (`shape`: loadgen.shapes.options), so a new shape
brings its own. Light on purpose: the CLI imports it to build the models."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadgen.shapes import options as shape_options


@dataclass
class LoadOptions:
    """When requests go: the shape (its family's options: loadgen.shapes.options) and the run's
    bounds."""

    shape: Any = field(default_factory=shape_options.options)
    think_time: str | None = None
    num_requests: int | None = None  # None: 200 unless --duration; a trace: its window's
    duration: float | None = None
    warmup: int = 0
    seed: int = 0


@dataclass
class SamplingOptions:
    """What every request asks of the server's sampler (--temperature, --top-p, --top-k,
    --sampling-seed), folded into each workload's spec (workloads.spec.with_sampling); a
    temperature nobody gives is 0, greedy (docs/workloads.md, "Sampling")."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    sampling_seed: int | None = None


SAMPLING_FLAGS = {"temperature": "--temperature", "top_p": "--top-p", "top_k": "--top-k", "seed": "--sampling-seed"}


def with_sampling(spec: str, o: SamplingOptions) -> str:
    """`spec` with the options' sampling as its key=value options; LoadgenError (one line) where
    a value is out of range or the workload already says otherwise."""
    from loadgen.errors import LoadgenError
    from workloads import WorkloadError
    from workloads.spec import Sampling, with_sampling

    given = {"temperature": o.temperature, "top_p": o.top_p, "top_k": o.top_k, "seed": o.sampling_seed}
    try:
        for key, value in given.items():
            if value is not None:
                Sampling.parse({key: value}, SAMPLING_FLAGS[key])
        return with_sampling(spec, given, SAMPLING_FLAGS)
    except WorkloadError as e:
        raise LoadgenError(str(e)) from None


@dataclass
class WorkloadOptions(SamplingOptions):
    workload: str = "synthetic:random"
    category: str | None = None
    skip_bad: bool = False
    data_dir: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float | None = None


@dataclass
class ResultOptions:
    goodput_specs: tuple[str, ...] = ()
    output_dir: str | None = None
    steady_state: bool = False


@dataclass
class RunOptions(ResultOptions, WorkloadOptions, LoadOptions):
    """`loadgen run`'s (and `check`'s) options, by field; the defaults are the command line's."""

    base_url: str | None = None
    model: str | None = None
    endpoint: str = "completions"
    api_key: str | None = None
    request_timeout: float = 600.0
    max_error_rate: float | None = None
    no_continuous_usage: bool = False
    tokenizer: str | None = None
    extra_body: str | None = None
    token_ids: bool = False
    keep_alive: bool | None = None
    metrics_url: str | None = None
    metrics_interval: float | None = None  # seconds between /metrics samples (None: 1)
    metrics_port: int | None = None
    time_scale: str | None = None
    workers: int = 1
    ray_address: str | None = None
    lateness_threshold_ms: float = 5.0
    timing_threshold_ms: float = 4.0
    quiet: bool = False
    servers: str | None = None  # check: a catalog deployment's --variant instead of --base-url
    variant: str | None = None
    engine: str | None = None
    speculative_config: str | None = None  # what a server at --base-url runs (vLLM's JSON)


@dataclass
class SimOptions(ResultOptions, WorkloadOptions, LoadOptions):
    """`loadgen simulate`'s options."""

    profile: str | None = None
    profile_anyway: bool = False  # a profile fitted on another machine used anyway, every output marked
    model: str | None = None
    spec_json: str | None = None  # --speculative-config
    endpoint: str = "completions"
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    prefix_caching: bool = True
    kv_cache_tokens: int | None = None
    client_rtt_ms: float | None = None  # None: the simulator's (loadgen.simulate.CLIENT_RTT_S)
    traces_path: str | None = None  # --acceptance-traces
    reasoning_parser: str | None = None  # a thinking model (docs/reasoning.md)
    tool_call_parser: str | None = None  # calls tools (--enable-auto-tool-choice)
    extra_body: str | None = None  # JSON merged into every request's body


@dataclass
class SweepOptions(SamplingOptions):
    """`loadgen sweep`'s options that make its plan (loadgen.planning.build.plan_from)."""

    servers: str | None = None  # None: the embedded emulator
    engine: str | None = None
    variants: str | None = None
    acceptance_lengths: str | None = None
    workloads: tuple[str, ...] = ()
    concurrency: str | None = None  # levels, e.g. 1..256
    rates: str | None = None
    trace_speeds: str | None = None  # levels of a trace sweep: multiples of its own rate
    goodput: str | None = None  # per-request objectives, e.g. ttft<=2s,tpot<=50ms
    shape: Any = field(default_factory=shape_options.options)  # a shape of its own (--ramp, ...): one level
    arrival: str | None = None
    burstiness: float | None = None
    num_requests: int | None = None
    duration: float | None = None
    warmup: int | None = None
    virtual: bool = False
    replay: str | None = None  # with virtual: a real sweep whose cells' requests are served as they were
    traces_from: str | None = None  # with virtual: real sweeps whose other cells give each cell its work and acceptance
    profile_anyway: bool = False  # a profile fitted on another machine used anyway, every output marked
    profile: str | None = None  # the emulator's cost profile (a name or a .toml file), over the deployment's
    repeats: int = 1
    seed: int = 0
    endpoint: str = "completions"
    request_timeout: float = 600.0
    extra_body: str | None = None
    token_ids: bool = False  # every request's prompt and output token ids kept (for loadgen traces)
    data_dir: str | None = None
    gpus: str | None = None
    parallel: bool = False
    port: int | None = None
    executable: str | None = None  # the engine's server command, over the deployment's
    workers: int = 1
    time_scale: str | None = None
    metrics_interval: float | None = None  # seconds between /metrics samples in every cell (None: 1)
    baseline: str = "baseline"


@dataclass
class CapacityOptions(SamplingOptions):
    """`loadgen capacity`'s options."""

    servers: str = ""
    engine: str | None = None
    variants: str | None = None
    workload: str = "chat"
    data_dir: str | None = None
    slo_texts: tuple[str, ...] = ()
    goodput: str | None = None
    by: str | None = None  # None: concurrency; trace speed with --trace, rate with the preset
    start: float | None = None  # None: 1 (the preset: the lowest rate early stopping can pass at)
    limit: float = 256.0
    resolution: float = 0.1
    repeats: int | None = None  # None: 3 (the preset: 1, as a submission runs each rate once)
    trace: str | None = None  # FORMAT:PATH: search the trace's speed (multiples of its own rate)
    trace_start: float | None = None
    trace_window: float | None = None
    preset: str | None = None  # mlperf-server (loadgen.capacity.mlperf)
    mlperf_benchmark: str | None = None  # its latency limits (None: llama3_1-8b's)
    num_requests: int | None = None
    duration: float | None = None
    warmup: int = 1
    baseline: str = "baseline"
    seed: int = 0
    time_scale: str | None = None
    output: str | None = None


def extra_body(text: str | None) -> dict | None:
    """--extra-body's JSON object (run, sweep, simulate), None when not given."""
    import json

    from loadgen.errors import LoadgenError

    if not text:
        return None
    try:
        extra = json.loads(text)
    except ValueError as e:
        raise LoadgenError(f"--extra-body is not valid JSON ({e}); give an object like '{{\"top_k\": 1}}'") from None
    if not isinstance(extra, dict):
        raise LoadgenError("--extra-body must be a JSON object, like '{\"top_k\": 1}'")
    return extra
