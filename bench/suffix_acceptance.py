"""Suffix decoding against n-gram and EAGLE-3 at the catalog's settings, on repeated agentic
tasks and on chat: acceptance length (vLLM's: 1 + accepted drafts per verify step) and output
tokens per decode step, served in waves of 8 in virtual time by the emulator's engine (docs/
emulator.md, "Suffix decoding"; tests/test_vllm_sd.py holds the claims with margins).

    python3 -m bench.suffix_acceptance        # a few seconds
"""

from __future__ import annotations

import json
from typing import Any

from servers.emulator import profile as profiles  # noqa: E402
from servers.emulator.engine import Engine, EngineConfig  # noqa: E402
from servers.emulator.spec import parse  # noqa: E402
from workloads.synthetic import agentic, kind_like  # noqa: E402

PROFILE = profiles.load("h100-llama-3.1-8b")
VARIANTS: dict[str, Any] = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 3, "prompt_lookup_max": 7},
    "eagle3": {"method": "eagle3", "model": "d", "num_speculative_tokens": 3},
    "suffix": {"method": "suffix"},
}


def serve_offline(spec: dict, requests, *, wave: int = 8, per_request: str = "none") -> Engine:
    """Serve the requests in waves of `wave` (each wave an offline batch, in virtual time)."""
    engine = Engine(PROFILE, parse(json.dumps(spec)), EngineConfig(per_request_spec_decode_metrics=per_request))
    now = 0.0
    for i in range(0, len(requests), wave):
        for r in requests[i : i + wave]:
            engine.submit(r.id, r.prompt, r.max_tokens, arrival=now, ignore_eos=r.ignore_eos)
        now = engine.run_to_end(now)
    return engine


def measure() -> dict[tuple[str, str], tuple[float, float]]:
    """(workload, variant) -> (acceptance length, output tokens per decode step)."""
    work = {"agentic": list(agentic(96, seed=1)), "chat": list(kind_like("chat", 32, output_len=400, seed=1))}
    out = {}
    for w, reqs in work.items():
        for v, spec in VARIANTS.items():
            s = serve_offline(spec, reqs, per_request="summary").stats
            decode_steps = s.itl.count  # every emission after a request's first
            out[w, v] = (1 + s.spec_accepted_tokens / s.spec_drafts, (s.generation_tokens - len(reqs)) / decode_steps)
    return out


def main() -> None:
    got = measure()
    print(f"{'workload':<10}{'variant':<9}{'acceptance length':>19}{'tokens per decode step':>24}")
    for (w, v), (al, per_step) in got.items():
        print(f"{w:<10}{v:<9}{al:>19.2f}{per_step:>24.2f}")


if __name__ == "__main__":
    main()
