"""What the engine counts, as plain data: exact counters and histograms with vLLM's buckets
(../shared/reference/vllm.md). The Prometheus exporter (metrics.py) and the simulator both
read these; nothing here knows about Prometheus."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
N_BUCKETS = (1, 2, 5, 10, 20)  # vLLM's request_params_n
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)  # vLLM's request_num_preemptions
LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass
class Histogram:
    buckets: tuple
    counts: list = field(default_factory=list)  # per bucket (not cumulative), last = +Inf
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1


@dataclass
class EngineStats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache ...
    prefix_hits: int = 0  # ... and found there
    prompt_computed: int = 0  # prompt tokens prefilled (vLLM's prompt_tokens_by_source local_compute) ...
    prompt_cached: int = 0  # ... and read from the prefix cache (local_cache_hit; prompt_tokens_cached)
    request_success: Counter = field(default_factory=Counter)  # by finished_reason
    spec_drafts: int = 0  # verification steps (per request) that carried drafts
    spec_verify_calls: int = 0  # every decoding step (per request) with speculative decoding on: SGLang's count
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_per_pos: list = field(default_factory=list)
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    steps: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    prefill: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    decode: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    request_prompt_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    request_generation_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    inference: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))  # RUNNING phase
    max_generation_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))  # n = 1: generated
    params_n: Histogram = field(default_factory=lambda: Histogram(N_BUCKETS))
    params_max_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))  # when the request set it
    request_preemptions: Histogram = field(default_factory=lambda: Histogram(PREEMPTION_BUCKETS))
    prefill_computed: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))  # prompt less cached
    # the real-time driver's check on itself (servers/emulator/realtime.py), in emulated time
    lag: Histogram = field(default_factory=lambda: Histogram(LAG_BUCKETS))  # chunks written late
    slowdown: float = 1.0  # actual / modeled step time, recent steps
    modeled_seconds: float = 0.0  # the steps' modeled time, summed
    lost_seconds: float = 0.0  # modeled time lost where the schedule restarted after a late step
    time_scale: float = 1.0  # real seconds per modeled second

    def spec_summary(self) -> dict:
        """vLLM's acceptance summaries over the counters (vllm.md)."""
        drafts = self.spec_drafts
        return {
            "drafts": drafts,
            "draft_tokens": self.spec_draft_tokens,
            "accepted_tokens": self.spec_accepted_tokens,
            "acceptance_rate": self.spec_accepted_tokens / self.spec_draft_tokens if self.spec_draft_tokens else None,
            "mean_acceptance_length": 1 + self.spec_accepted_tokens / drafts if drafts else None,
            "per_position": [n / drafts for n in self.spec_accepted_per_pos] if drafts else [],
        }
