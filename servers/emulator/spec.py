"""`--speculative-config` as vLLM reads it (see ../shared/reference/vllm.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass

METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp", "suffix")
ALIASES = {
    "deepseek_mtp": "mtp",
    "qwen3_next_mtp": "mtp",
    "glm4_moe_mtp": "mtp",
    "ernie_mtp": "mtp",
    "mimo_mtp": "mtp",
    "longcat_flash_mtp": "mtp",
}
NOT_EMULATED = ("medusa", "mlp_speculator", "ngram_gpu")
REJECTION_METHODS = ("standard", "synthetic", "block", "fly")


class SpecError(ValueError):
    pass


@dataclass(frozen=True)
class SpecConfig:
    method: str
    k: int
    model: str | None = None
    prompt_lookup_min: int = 5
    prompt_lookup_max: int = 5
    # vLLM's num_speculative_tokens_per_batch_size: (first, last, k) over inclusive batch sizes
    schedule: tuple[tuple[int, int, int], ...] | None = None
    # rejection_sample_method "synthetic": per-position unconditional acceptance rates (vLLM
    # resolves synthetic_acceptance_length to these); None: the drafter's own acceptance
    synthetic_rates: tuple[float, ...] | None = None
    # suffix decoding (vLLM's suffix_decoding_*)
    suffix_max_tree_depth: int = 24
    suffix_max_cached_requests: int = 10000
    suffix_max_spec_factor: float = 1.0
    suffix_min_token_prob: float = 0.1
    # vLLM's enable_adaptive_verification: a per-step verification budget over the batch
    # (servers/emulator/verification.py)
    adaptive_verification: bool = False

    @property
    def label(self) -> str:
        synthetic = (
            " synthetic acceptance " + ",".join(f"{r:g}" for r in self.synthetic_rates)
            if self.synthetic_rates is not None
            else ""
        )
        adaptive = " adaptive verification" if self.adaptive_verification else ""
        if self.schedule:
            ranges = ",".join(f"{a}-{b}:{k}" for a, b, k in self.schedule)
            return f"{self.method} k by batch size {ranges}{synthetic}{adaptive}"
        return f"{self.method} k={self.k}{synthetic}{adaptive}"

    @property
    def conditional_rates(self) -> tuple[float, ...] | None:
        """The synthetic rates as vLLM's rejection sampler applies them: position i accepted
        with probability p_i / p_(i-1) once i-1 was (unconditional_to_conditional_rates)."""
        if self.synthetic_rates is None:
            return None
        prev = (1.0, *self.synthetic_rates[:-1])
        return tuple(p / q if q > 0.0 else 0.0 for p, q in zip(self.synthetic_rates, prev))

    def k_by_batch(self, max_num_seqs: int) -> list[int]:
        """k for every batch size 0..max_num_seqs, as vLLM's scheduler looks it up
        (build_dynamic_sd_schedule_lookup): each range's k, a gap between ranges carrying the
        previous range's k, the last range's k past its end; never more than num_speculative_tokens."""
        if not self.schedule:
            return [self.k] * (max_num_seqs + 1)
        dense = [0] * (max_num_seqs + 1)
        k = self.schedule[0][2]
        for size in range(1, max_num_seqs + 1):
            for first, last, k_range in self.schedule:
                if first <= size <= last:
                    k = k_range
                    break
            dense[size] = min(self.k, k)  # k carries past a range's end until the next begins
        return dense


def _schedule(value) -> tuple[tuple[int, int, int], ...]:
    """num_speculative_tokens_per_batch_size checked as vLLM checks it
    (validate_and_normalize_dynamic_sd_schedule), sorted by range start."""
    key = "num_speculative_tokens_per_batch_size"
    if not isinstance(value, list) or not value:
        raise SpecError(
            f"--speculative-config: {key} must be a non-empty list of "
            "[range_start, range_end, num_speculative_tokens] entries"
        )
    out = []
    for entry in value:
        if (
            not isinstance(entry, (list, tuple))
            or len(entry) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
        ):
            raise SpecError(
                f"--speculative-config: each {key} entry must be 3 integers "
                f"[range_start, range_end, num_speculative_tokens], got {entry!r}"
            )
        first, last, k = entry
        if first <= 0 or last <= 0:
            raise SpecError(f"--speculative-config: batch-size range ({first}, {last}) must be positive")
        if first > last:
            raise SpecError(f"--speculative-config: batch-size range start must be <= end in {list(entry)}")
        if k < 0:
            raise SpecError(f"--speculative-config: {key} values must be >= 0")
        out.append((first, last, k))
    out.sort(key=lambda e: e[0])
    end = 0
    for first, last, _ in out:
        if first <= end:
            raise SpecError("--speculative-config: batch-size ranges must be non-overlapping")
        end = last
    if out[0][0] != 1:
        raise SpecError("--speculative-config: the first batch-size range must start at 1, so every batch size has a k")
    return tuple(out)


def controls(cfg: dict) -> tuple[tuple[tuple[int, int, int], ...] | None, bool]:
    """vLLM's controls of a speculative config, checked as vLLM checks them: k by batch size
    (None when not given) and adaptive verification. The emulator's parse and the deployment
    catalog's load both call this, so a bad control is refused before any server starts."""
    schedule = cfg.get("num_speculative_tokens_per_batch_size")
    adaptive = cfg.get("enable_adaptive_verification", False)
    if not isinstance(adaptive, bool):
        raise SpecError(f"--speculative-config: enable_adaptive_verification must be true or false, got {adaptive!r}")
    return (None if schedule is None else _schedule(schedule)), adaptive


def _positive_int(cfg: dict, key: str, default=None) -> int | None:
    v = cfg.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise SpecError(f"--speculative-config: {key} must be a positive integer, got {v!r}")
    return v


def parse(text: str | None) -> SpecConfig | None:
    """None for no speculative decoding; SpecError with a one-line reason for bad input."""
    if text is None or not text.strip():
        return None
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise SpecError(
            f"--speculative-config is not valid JSON ({e}); give e.g. "
            '\'{"method": "ngram", "num_speculative_tokens": 3}\''
        ) from None
    if not isinstance(cfg, dict):
        raise SpecError("--speculative-config must be a JSON object")
    model = cfg.get("model")
    method = cfg.get("method")
    if method is None:
        name = str(model or "").lower()
        if "eagle3" in name:
            method = "eagle3"
        elif "eagle-" in name:
            method = "eagle"
        elif model:
            raise SpecError(
                f'--speculative-config: draft model {model!r} needs "method": "draft_model" (vLLM does not guess it)'
            )
        else:
            raise SpecError(f"--speculative-config: give a method ({', '.join(METHODS)})")
    method = ALIASES.get(method, method)
    if method in NOT_EMULATED:
        raise SpecError(f"--speculative-config: method {method!r} is not emulated; emulated: {', '.join(METHODS)}")
    if method not in METHODS:
        raise SpecError(f"--speculative-config: unknown method {method!r}; valid: {', '.join(METHODS)}")
    suffix = _suffix(cfg) if method == "suffix" else {}
    if "num_speculative_tokens" not in cfg and method != "suffix":
        raise SpecError("--speculative-config: num_speculative_tokens is required")
    # suffix decoding: vLLM defaults num_speculative_tokens to the tree depth (a maximum)
    k = _positive_int(cfg, "num_speculative_tokens", suffix.get("suffix_max_tree_depth"))
    if k is None:
        raise SpecError("--speculative-config: num_speculative_tokens is required")
    if method in ("eagle", "eagle3", "draft_model") and not model:
        raise SpecError(f'--speculative-config: method {method} needs "model" (the draft)')
    lo = _positive_int(cfg, "prompt_lookup_min")
    hi = _positive_int(cfg, "prompt_lookup_max")
    if hi is None:
        lo = hi = lo or 5
    elif lo is None:
        lo = hi
    if lo > hi:
        raise SpecError(f"--speculative-config: prompt_lookup_min {lo} > prompt_lookup_max {hi}")
    schedule, adaptive = controls(cfg)
    return SpecConfig(
        adaptive_verification=adaptive,
        method=method,
        k=k,
        model=model,
        prompt_lookup_min=lo,
        prompt_lookup_max=hi,
        schedule=schedule,
        synthetic_rates=_synthetic(cfg, k),
        **suffix,
    )


def _number(cfg: dict, key: str):
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"--speculative-config: {key} must be a number, got {v!r}")
    return float(v)


def _suffix(cfg: dict) -> dict:
    """vLLM's suffix_decoding_* settings, checked as _validate_suffix_decoding checks them."""
    out = {}
    depth = cfg.get("suffix_decoding_max_tree_depth", 24)
    cached = cfg.get("suffix_decoding_max_cached_requests", 10000)
    for key, v, lo in (
        ("suffix_decoding_max_tree_depth", depth, 1),
        ("suffix_decoding_max_cached_requests", cached, 0),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise SpecError(f"--speculative-config: {key}={v!r} must be an integer >= {lo}")
    out["suffix_max_tree_depth"], out["suffix_max_cached_requests"] = depth, cached
    factor = _number(cfg, "suffix_decoding_max_spec_factor") if "suffix_decoding_max_spec_factor" in cfg else 1.0
    if factor < 0:
        raise SpecError(f"--speculative-config: suffix_decoding_max_spec_factor={factor:g} must be >= 0")
    prob = _number(cfg, "suffix_decoding_min_token_prob") if "suffix_decoding_min_token_prob" in cfg else 0.1
    if not 0 <= prob <= 1:
        raise SpecError(f"--speculative-config: suffix_decoding_min_token_prob={prob:g} must be in [0, 1]")
    out["suffix_max_spec_factor"], out["suffix_min_token_prob"] = factor, prob
    return out


def _synthetic(cfg: dict, k: int) -> tuple[float, ...] | None:
    """rejection_sample_method and the synthetic acceptance settings, checked and resolved as
    vLLM's SpeculativeConfig does (_resolve_synthetic_acceptance_rates): exactly one of
    synthetic_acceptance_rates (k entries in [0, 1], non-increasing) or
    synthetic_acceptance_length (in [1, k + 1]; to rates by the minimum-variance schedule)."""
    method = cfg.get("rejection_sample_method", "standard")
    rates, length = cfg.get("synthetic_acceptance_rates"), cfg.get("synthetic_acceptance_length")
    if method not in REJECTION_METHODS:
        raise SpecError(
            f"--speculative-config: rejection_sample_method {method!r} is not one of {', '.join(REJECTION_METHODS)}"
        )
    if method != "synthetic":
        if rates is not None or length is not None:
            raise SpecError(
                "--speculative-config: synthetic_acceptance_rates / synthetic_acceptance_length "
                "are only valid with rejection_sample_method='synthetic'"
            )
        if method in ("block", "fly"):
            raise SpecError(
                f"--speculative-config: rejection_sample_method {method!r} is not emulated "
                "(emulated: standard, synthetic)"
            )
        return None
    if (rates is None) == (length is None):
        raise SpecError(
            "--speculative-config: rejection_sample_method='synthetic' requires exactly one of "
            "synthetic_acceptance_rates or synthetic_acceptance_length"
        )
    if rates is not None:
        if not isinstance(rates, list) or not all(
            isinstance(r, (int, float)) and not isinstance(r, bool) for r in rates
        ):
            raise SpecError(
                f"--speculative-config: synthetic_acceptance_rates must be a list of numbers, got {rates!r}"
            )
        if len(rates) != k:
            raise SpecError(f"--speculative-config: synthetic_acceptance_rates must have length {k}, got {rates}")
        if not all(0.0 <= r <= 1.0 for r in rates):
            raise SpecError(f"--speculative-config: synthetic_acceptance_rates entries must be in [0, 1], got {rates}")
        if any(rates[i] > rates[i - 1] for i in range(1, k)):
            raise SpecError(f"--speculative-config: synthetic_acceptance_rates must be non-increasing, got {rates}")
        return tuple(float(r) for r in rates)
    length = _number(cfg, "synthetic_acceptance_length")
    if not 1.0 <= length <= k + 1:
        raise SpecError(f"--speculative-config: synthetic_acceptance_length must be in [1, {k + 1}], got {length:g}")
    return length_to_rates(length, k)


def length_to_rates(length: float, k: int) -> tuple[float, ...]:
    """A mean acceptance length as per-position unconditional rates, vLLM's minimum-variance
    schedule (_acceptance_length_to_rates): 1.0 for the whole drafts, the fraction next, 0 after."""
    drafts = length - 1
    full = int(drafts)
    return tuple(([1.0] * full + [drafts - full] + [0.0] * (k - full - 1))[:k])
