"""`/metrics` as vLLM serves it: the names, labels (`model_name`, `engine`) and histogram
buckets of ../shared/reference/vllm.md, rendered by prometheus-client from the engine's exact
statistics. Counters and histograms carry `_created` samples, as vLLM's do; families vLLM
exports for parts the emulator has not (multimodal and external KV caches, admission limits,
sleep) are there at their idle values, so a dashboard's query finds them. Always the plain-text exposition
format, so colons survive whatever a scraper asks for (the OpenMetrics escaping trap)."""

from __future__ import annotations

import functools
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


def _value(s: EngineStats, key: str, spec_k: int | None) -> float | dict | None:
    """The engine's value of loadgen's metric `key` (loadgen/load/metric_names.py): a number, or
    {label: value} for a labelled family (None: the emulator has no such figure)."""
    verify = s.spec_verify_calls
    values: dict = {
        "prompt_tokens": s.prompt_tokens,
        "generation_tokens": s.generation_tokens,
        "preemptions": s.preemptions,
        "requests": sum(s.request_success.values()),
        "request_success": {("finished_reason", r): s.request_success.get(r, 0) for r in FINISHED_REASONS},
        "prefix_cache_queries": s.prefix_queries,
        "prefix_cache_hits": s.prefix_hits,
        "spec_drafts": s.spec_drafts,
        "spec_verify_calls": verify,
        "spec_draft_tokens": s.spec_draft_tokens,
        "spec_accepted_tokens": s.spec_accepted_tokens,
        "spec_rejected_tokens": s.spec_draft_tokens - s.spec_accepted_tokens,
        "spec_accepted_per_pos": {("position", str(i)): n for i, n in enumerate(s.spec_accepted_per_pos)},
        "running": s.running,
        "waiting": s.waiting,
        "kv_usage": s.kv_usage,
        # SGLang's whole-server averages (since the server started; SGLang's cover its last interval)
        "spec_accept_length": 1 + s.spec_accepted_tokens / verify if verify else 0.0,
        "spec_accept_rate": s.spec_accepted_tokens / (verify * spec_k) if verify and spec_k else 0.0,
    }
    return values.get(key)


def missing(metrics) -> list[str]:
    """The keys of a dialect's metrics (servers/engines/dialect.py's Metrics) the emulator has
    no figure for: it cannot answer in that dialect."""
    stats = EngineStats()
    return [
        *(k for k in (*metrics.counters, *metrics.gauges) if _value(stats, k, 1) is None),
        *(k for k in metrics.histograms if not isinstance(getattr(stats, k, None), Histogram)),
    ]


class DeclaredCollector(VllmCollector):
    """The metrics of a dialect other than vLLM's complete exposition (`--flavor NAME`): every
    name the dialect declares (its first, current one), with the engine's figure for its key,
    labelled by model_name only; SD families only with speculative decoding, as vLLM; and the
    emulator's own check on itself. Only what loadgen reads of that dialect, not every family
    its engine exports."""

    def __init__(self, metrics, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._metrics = metrics

    def collect(self):
        s = self._stats()
        yield from self._own(s)
        if self._vllm:  # --disable-log-stats: none of the server's own
            yield from self._declared(s)

    def _declared(self, s: EngineStats):
        labels = {"model_name": self._labels["model_name"]}
        for cls, declared in ((CounterMetricFamily, self._metrics.counters), (GaugeMetricFamily, self._metrics.gauges)):
            for key, names in declared.items():
                if key.startswith("spec_") and not self._spec_k:
                    continue
                name, value = names[0].removesuffix("_total"), _value(s, key, self._spec_k)
                if isinstance(value, dict):  # a labelled family: {(label, value): figure}
                    label = next(iter(value))[0] if value else "label"
                    yield self._by(cls, name, key, label, {v: x for (_, v), x in value.items()}, labels)
                else:
                    yield _one_family(cls, name, key, labels, value, self._created)
        for key, names in self._metrics.histograms.items():
            yield _histogram(names[0], key, labels, getattr(s, key), self._created)


def _one_family(cls, name: str, doc: str, labels: dict, value, created: float):
    fam = cls(name, doc, labels=list(labels))
    if cls is CounterMetricFamily:
        fam.add_metric(list(labels.values()), float(value or 0), created=created)
    else:
        fam.add_metric(list(labels.values()), float(value or 0))
    return fam


@functools.cache
def rendered_by_vllm() -> frozenset[str]:
    """Every sample family vLLM's exposition (VllmCollector) has, with SD on: a dialect whose
    current names are all among them is answered with it whole."""
    c = VllmCollector(lambda: EngineStats(spec_accepted_per_pos=[0]), "m", 1)
    out = set()
    for fam in c.collect():
        out.add(fam.name)
        out.update(smp.name for smp in fam.samples)
    return frozenset(out)


def collector_for(metrics, stats: Callable[[], EngineStats], model_name: str, spec_k: int | None, vllm_metrics: bool):
    """vLLM's complete exposition where it holds every name the dialect declares (vLLM's own),
    else the dialect's declared names."""
    names = {n[0] for kind in (metrics.counters, metrics.gauges, metrics.histograms) for n in kind.values()}
    if names <= rendered_by_vllm():
        return VllmCollector(stats, model_name, spec_k, vllm_metrics)
    return DeclaredCollector(metrics, stats, model_name, spec_k, vllm_metrics)


def registry(collector: VllmCollector) -> CollectorRegistry:
    """The emulator's registry: its collector, and the process's own metrics (CPU seconds,
    memory), which vLLM's API server exports too (prometheus-client's default registry)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    ProcessCollector(registry=reg)
    return reg


def render(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)
