"""`/metrics` as vLLM serves it: the names, labels (`model_name`, `engine`) and histogram
buckets of ../shared/reference/vllm.md, rendered by prometheus-client from the engine's exact
statistics. Counters and histograms carry `_created` samples, as vLLM's do; families vLLM
exports for parts the emulator has not (multimodal and external KV caches, admission limits,
sleep) are there at their idle values, so a dashboard's query finds them. Always the plain-text exposition
format, so colons survive whatever a scraper asks for (the OpenMetrics escaping trap)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.samples import Sample

from servers.emulator.counters import EngineStats, Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FINISHED_REASONS = ("stop", "length", "abort")

# histogram attribute of EngineStats -> (metric name, help)
_HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    "itl": ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    "tpot": ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request."),
    "e2e": ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    "queue": ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
    "prefill": ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
    "decode": ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."),
    "request_prompt_tokens": ("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    "request_generation_tokens": ("vllm:request_generation_tokens", "Number of generation tokens processed."),
    "iteration_tokens": ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step."),
    "inference": ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."),
    "max_generation_tokens": (
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
    ),
    "params_n": ("vllm:request_params_n", "Histogram of the n request parameter."),
    "params_max_tokens": ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter."),
    "request_preemptions": (
        "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
    ),
    "prefill_computed": (
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
    ),
}
# vLLM's label values for its labelled families (vllm/v1/metrics/loggers.py, 0.32)
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


def _histogram(name: str, doc: str, labels: dict, h: Histogram, created: float | None = None) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    cumulative, buckets = 0, []
    for le, n in zip(h.buckets, h.counts):
        cumulative += n
        buckets.append((repr(float(le)), cumulative))
    buckets.append(("+Inf", h.count))
    fam.add_metric(list(labels.values()), buckets, sum_value=h.total)
    if created is not None:  # as prometheus-client's own Histogram writes it
        fam.samples.append(Sample(f"{name}_created", dict(labels), created))
    return fam


class VllmCollector:
    def __init__(
        self, stats: Callable[[], EngineStats], model_name: str, spec_k: int | None, vllm_metrics: bool = True
    ) -> None:
        self._stats = stats
        self._labels = {"model_name": model_name, "engine": "0"}
        self._spec_k = spec_k
        self._vllm = vllm_metrics
        self._created = time.time()

    def _counter(self, name: str, doc: str, value: float, extra: dict | None = None):
        labels = {**self._labels, **(extra or {})}
        fam = CounterMetricFamily(name, doc, labels=list(labels))
        fam.add_metric(list(labels.values()), value, created=self._created)
        return fam

    def _by(self, cls, name: str, doc: str, label: str, values: dict, labels: dict | None = None):
        """A family with one more label (`label`), a sample per value of it."""
        base = self._labels if labels is None else labels
        fam = cls(name, doc, labels=[*base, label])
        for v, x in values.items():
            if cls is CounterMetricFamily:
                fam.add_metric([*base.values(), v], x, created=self._created)
            else:
                fam.add_metric([*base.values(), v], x)
        return fam

    def _idle(self, s: EngineStats):
        """vLLM's families for what it has and the emulator has not, or does not limit."""
        yield self._by(
            GaugeMetricFamily,
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason.",
            "reason",
            {"capacity": s.waiting, "deferred": 0},
        )
        yield self._by(
            GaugeMetricFamily,
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake.",
            "sleep_state",
            {state: int(state == "awake") for state in SLEEP_STATES},
        )
        yield self._by(
            CounterMetricFamily,
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            "reason",
            dict.fromkeys(ADMISSION_REASONS, 0),
            labels={"model_name": self._labels["model_name"]},  # vLLM: no engine label on this one
        )
        for name, doc in (
            ("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector."),
            ("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector."),
            ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."),
            ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."),
        ):
            yield self._counter(name, doc, 0)

    def collect(self):
        s = self._stats()
        yield from self._own(s)
        if self._vllm:
            yield from self._vllm_families(s)

    def _own(self, s: EngineStats):
        """The emulator's check on itself (`emulator:`), whatever server it answers as."""
        lv = list(self._labels.values())
        yield _histogram(
            "emulator:step_lag_seconds",
            "How long after its modeled end each step's chunks were written (emulated seconds).",
            self._labels,
            s.lag,
        )
        for name, doc, value in (
            ("emulator:slowdown", "Actual over modeled time of recent steps (1 = real time).", s.slowdown),
            ("emulator:time_scale", "Real seconds per modeled second (--time-scale).", s.time_scale),
        ):
            g = GaugeMetricFamily(name, doc, labels=list(self._labels))
            g.add_metric(lv, value)
            yield g
        yield self._counter("emulator:steps", "Engine steps run.", s.steps)
        yield self._counter(
            "emulator:modeled_seconds", "Modeled time of the steps run (emulated seconds).", s.modeled_seconds
        )
        yield self._counter(
            "emulator:lost_seconds",
            "Modeled time lost where the schedule restarted after a step written late (emulated seconds).",
            s.lost_seconds,
        )
        yield self._counter(
            "emulator:cpu_seconds",
            "CPU time of this process, to the microsecond (what loadgen sweep --time-scale auto measures).",
            time.process_time(),
        )

    def _vllm_families(self, s: EngineStats):
        """vLLM's families, as ../shared/reference/vllm.md names them."""
        lv = list(self._labels.values())
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", s.running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage),
        ):
            g = GaugeMetricFamily(name, doc, labels=list(self._labels))
            g.add_metric(lv, value)
            yield g
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens)
        yield self._by(
            CounterMetricFamily,
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            {"local_compute": s.prompt_computed, "local_cache_hit": s.prompt_cached, "external_kv_transfer": 0},
        )
        yield self._counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", s.prompt_cached
        )
        yield self._by(
            CounterMetricFamily,
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them.",
            "source",
            {src: s.prefix_hits if src == "device" else 0 for src in CACHE_HIT_SOURCES},
        )
        yield self._counter("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens)
        yield self._counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", s.preemptions)
        yield self._counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", s.prefix_queries
        )
        yield self._counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", s.prefix_hits
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*self._labels, "finished_reason"],
        )
        for reason in FINISHED_REASONS:
            success.add_metric([*lv, reason], s.request_success.get(reason, 0), created=self._created)
        yield success
        if self._spec_k:
            yield self._counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", s.spec_drafts)
            yield self._counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", s.spec_draft_tokens)
            yield self._counter(
                "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", s.spec_accepted_tokens
            )
            per_pos = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=[*self._labels, "position"],
            )
            for pos, n in enumerate(s.spec_accepted_per_pos):
                per_pos.add_metric([*lv, str(pos)], n, created=self._created)
            yield per_pos
        yield from self._idle(s)
        for attr, (name, doc) in _HISTOGRAMS.items():
            yield _histogram(name, doc, self._labels, getattr(s, attr), self._created)


# SGLang's histograms the emulator serves (sglang's observability/metrics_collector.py)
_SGLANG_HISTOGRAMS = {
    "ttft": ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    "itl": ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    "e2e": ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds"),
}


class SglangCollector(VllmCollector):
    """`/metrics` as SGLang (--enable-metrics) names it, for `--flavor sglang`: its counters of
    tokens and verification calls, its load gauges, its whole-server acceptance gauges (here
    since the server started; SGLang's cover its last logging interval) and latency
    histograms, plus the emulator's own check on itself. Only what loadgen reads of SGLang
    (servers/engines/sglang.py), not every family it exports."""

    def collect(self):
        s = self._stats()
        yield from self._own(s)
        if self._vllm:  # --disable-log-stats: none of the server's own
            yield from self._sglang_families(s)

    def _sglang_families(self, s: EngineStats):
        labels = {"model_name": self._labels["model_name"]}
        for name, doc, value in (
            ("sglang:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens),
            ("sglang:generation_tokens", "Number of generation tokens processed.", s.generation_tokens),
            ("sglang:num_requests", "Number of requests processed.", sum(s.request_success.values())),
        ):
            fam = CounterMetricFamily(name, doc, labels=list(labels))
            fam.add_metric(list(labels.values()), value, created=self._created)
            yield fam
        gauges: list[tuple[str, str, float]] = [
            ("sglang:num_running_reqs", "The number of running requests.", s.running),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", s.waiting),
            ("sglang:token_usage", "The token usage.", s.kv_usage),
        ]
        if self._spec_k:
            fam = CounterMetricFamily(
                "sglang:spec_verify_calls", "The number of verification forward calls.", labels=list(labels)
            )
            fam.add_metric(list(labels.values()), s.spec_verify_calls, created=self._created)
            yield fam
            drafts, accepted = s.spec_verify_calls, s.spec_accepted_tokens
            gauges += [
                (
                    "sglang:spec_accept_length",
                    "The average acceptance length of speculative decoding.",
                    1 + accepted / drafts if drafts else 0.0,
                ),
                (
                    "sglang:spec_accept_rate",
                    "The average acceptance rate of speculative decoding.",
                    accepted / (drafts * self._spec_k) if drafts else 0.0,  # proposed: k a verify call
                ),
            ]
        for name, doc, level in gauges:
            g = GaugeMetricFamily(name, doc, labels=list(labels))
            g.add_metric(list(labels.values()), level)
            yield g
        for attr, (name, doc) in _SGLANG_HISTOGRAMS.items():
            yield _histogram(name, doc, labels, getattr(s, attr), self._created)


def registry(collector: VllmCollector) -> CollectorRegistry:
    """The emulator's registry: its collector, and the process's own metrics (CPU seconds,
    memory), which vLLM's API server exports too (prometheus-client's default registry)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    ProcessCollector(registry=reg)
    return reg


def render(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)
