"""A k schedule vLLM can run: `num_speculative_tokens_per_batch_size` (vLLM 0.32 and later), a
list of `[first, last, k]` over inclusive batch-size ranges; the engine picks each step's k from
the number of requests it scheduled (servers/emulator/spec.py implements it as vLLM does).

From a what-if's fixed-k results, per drafter: at each batch size evaluated, the k (0: no
speculation) with the highest throughput; between two evaluated sizes b < b' the switch is at
their geometric mean (sizes up to floor(sqrt(b * b')) take b's k), below the first size its k
holds, above the last its k holds up to the deployment's max_num_seqs; neighbouring ranges with
the same k are merged. Written as the `--speculative-config` JSON and as a deployment file whose
variants are no speculation, each fixed k evaluated and the schedule, for `loadgen sweep`.
"""

from __future__ import annotations

import math
from typing import Any

MAX_BATCH = 256


def best_k(results: list[dict], method: str) -> dict[int, int]:
    """Per batch size, the fixed k of `method` (or 0, no speculation) with the highest
    throughput; `results` as whatif.json holds them."""
    best: dict[int, tuple[float, int]] = {}
    for r in results:
        if r["kind"] == "none":
            k = 0
        elif r["kind"] == "fixed" and r["policy"].startswith(f"{method} k="):
            k = int(r["policy"].split("k=")[1])
        else:
            continue
        if r["batch"] not in best or r["output_tok_s"] > best[r["batch"]][0]:
            best[r["batch"]] = (r["output_tok_s"], k)
    return {b: k for b, (_, k) in sorted(best.items())}


def ranges(by_batch: dict[int, int], max_batch: int = MAX_BATCH) -> list[list[int]]:
    """The rule above: [[first, last, k], ...] covering 1..max(max_batch, the largest size)."""
    sizes = sorted(by_batch)
    top = max(max_batch, sizes[-1])
    out: list[list[int]] = []
    first = 1
    for i, b in enumerate(sizes):
        last = top if i == len(sizes) - 1 else math.isqrt(b * sizes[i + 1])
        if last < first:
            continue
        if out and out[-1][2] == by_batch[b]:
            out[-1][1] = last
        else:
            out.append([first, last, by_batch[b]])
        first = last + 1
    return out


def speculative_config(base: dict, schedule: list[list[int]]) -> dict:
    """`base` (the drafter's config: method, model, lookup) with the schedule; its
    num_speculative_tokens, the most drafts any range asks for, caps the schedule in vLLM."""
    return {
        **base,
        "num_speculative_tokens": max(1, max(k for _, _, k in schedule)),
        "num_speculative_tokens_per_batch_size": schedule,
    }


def catalog_deployment(model: str | None):
    """The catalog deployment serving `model`, or None."""
    from servers.deployments import DeploymentError, available, load

    for name in available():
        try:
            dep = load(name)
        except DeploymentError:
            continue
        if model is not None and dep.model == model:
            return dep
    return None


def drafter_config(method: str, model: str | None) -> dict:
    """The drafter's --speculative-config from the catalog deployment serving `model` (its
    first variant with that method), or the method alone."""
    dep = catalog_deployment(model)
    for v in dep.variants.values() if dep else ():
        if v.speculative_config and v.speculative_config.get("method") == method:
            return {
                k: val
                for k, val in v.speculative_config.items()
                if k not in ("num_speculative_tokens", "num_speculative_tokens_per_batch_size")
            }
    return {"method": method} if method == "ngram" else {"method": method, "model": "YOUR-DRAFT-MODEL"}


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"


def deployment_toml(
    model: str, method: str, config: dict, ks: list[int], *, description: str, max_num_seqs: int = MAX_BATCH
) -> str:
    """A deployment file: no speculation, `method` at each fixed k in `ks`, the schedule, and
    (a model drafter) the largest k with vLLM's adaptive verification."""
    fixed = {k: val for k, val in config.items() if k != "num_speculative_tokens_per_batch_size"}
    dep = catalog_deployment(model)  # its GPUs and flags, when the catalog serves the model
    lines = [
        f"description = {_toml(description)}",
        f"model = {_toml(model)}",
        f"tensor_parallel_size = {dep.tensor_parallel_size if dep else 1}",
        f"max_num_seqs = {max_num_seqs}",
        f"args = {_toml(list(dep.args) if dep else ['--no-enable-prefix-caching'])}",
        "",
        "[variants.baseline]",
        "",
    ]
    for k in ks:
        lines += [
            f"[variants.{method}-k{k}]",
            f"speculative_config = {_toml({**fixed, 'num_speculative_tokens': k})}",
            "",
        ]
    lines += [f"[variants.{method}-schedule]", f"speculative_config = {_toml(config)}", ""]
    if method not in ("ngram", "suffix"):  # vLLM budgets verification for drafters with probabilities only
        adaptive = {**fixed, "num_speculative_tokens": max(ks), "enable_adaptive_verification": True}
        lines += [f"[variants.{method}-adaptive]", f"speculative_config = {_toml(adaptive)}", ""]
    return "\n".join(lines)


def schedules(results: list[dict], methods: list[str], model: str | None, max_batch: int = MAX_BATCH) -> dict:
    """Per drafter: the best k at each batch size evaluated, the schedule, and its config."""
    out: dict[str, dict[str, Any]] = {}
    for m in methods:
        by_batch = best_k(results, m)
        if not by_batch or not any(by_batch.values()):
            out[m] = {
                "by_batch": {str(b): k for b, k in by_batch.items()},
                "ranges": None,
                "speculative_config": None,
                "why": "no fixed k beats no speculation at any batch size",
            }
            continue
        rng = ranges(by_batch, max_batch)
        out[m] = {
            "by_batch": {str(b): k for b, k in by_batch.items()},
            "ranges": rng,
            "speculative_config": speculative_config(drafter_config(m, model), rng),
        }
    return out


RULE = (
    "at each batch size evaluated the fixed k (0: none) with the highest throughput; between sizes b < b' the "
    "switch at floor(sqrt(b x b')); the first size's k below it, the last's up to max_num_seqs"
)
