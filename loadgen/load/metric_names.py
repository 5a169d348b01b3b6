"""The one catalog of server metric names loadgen reads: vLLM's (`vllm:`,
../shared/reference/vllm.md) and llama.cpp's llama-server (`llamacpp:`, with `--metrics`).
For each key the names are tried in order and the first present is used: vLLM's current name,
its older names, then llama.cpp's. A key llama.cpp has no metric for reads as absent."""

from __future__ import annotations

# counter key -> sample name(s), with the `_total` suffix as scraped
COUNTERS = {
    "prompt_tokens": ("vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total"),
    "preemptions": ("vllm:num_preemptions_total",),
    "request_success": ("vllm:request_success_total",),  # by finished_reason
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total",),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_drafts_total"),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total", "llamacpp:spec_decode_num_draft_tokens_total"),
    "spec_accepted_tokens": (
        "vllm:spec_decode_num_accepted_tokens_total",
        "llamacpp:spec_decode_num_accepted_tokens_total",
    ),
    "spec_accepted_per_pos": (
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
    ),  # by position
    # the emulated engine only (servers/emulator/realtime.py), in emulated seconds
    "emulator_modeled": ("emulator:modeled_seconds_total",),  # modeled time of the steps run
    "emulator_lost": ("emulator:lost_seconds_total",),  # lost where its schedule restarted late
}
GAUGES = {
    "running": ("vllm:num_requests_running", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # renamed in 0.9-0.11
    "emulator_slowdown": ("emulator:slowdown",),  # the emulated engine only: actual / modeled step time
    "emulator_time_scale": ("emulator:time_scale",),  # the emulated engine only: real s per modeled s
}
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),  # renamed in 0.11
    "tpot": ("vllm:request_time_per_output_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
    "iteration_tokens": ("vllm:iteration_tokens_total",),  # a histogram whose name ends in _total
    "emulator_step_lag": ("emulator:step_lag_seconds",),  # the emulated engine only: chunks late
}
