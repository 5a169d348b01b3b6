"""The one catalog of server metric names loadgen reads, by key, gathered from the serving
engines' own (servers/engines: each engine's `metrics`, e.g. vLLM's `vllm:` names of
../shared/reference/vllm.md). For each key the names are tried in order and the first present
is used: vLLM's current name, its older names, then the other engines'. A key an engine has no
metric for reads as absent on its servers."""

from __future__ import annotations

from servers import engines

# counter key -> sample name(s), with the `_total` suffix as scraped
COUNTERS = engines.metric_names("counters")
GAUGES = engines.metric_names("gauges")
HISTOGRAMS = engines.metric_names("histograms")
