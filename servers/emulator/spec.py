"""`--speculative-config` as vLLM reads it (see ../shared/reference/vllm.md)."""
from __future__ import annotations

import json
from dataclasses import dataclass

METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp")
ALIASES = {"deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp", "glm4_moe_mtp": "mtp",
           "ernie_mtp": "mtp", "mimo_mtp": "mtp", "longcat_flash_mtp": "mtp"}
NOT_EMULATED = ("medusa", "mlp_speculator", "suffix", "ngram_gpu")


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

    @property
    def label(self) -> str:
        if self.schedule:
            return f"{self.method} k by batch size " + ",".join(f"{a}-{b}:{k}" for a, b, k in self.schedule)
        return f"{self.method} k={self.k}"

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
        raise SpecError(f"--speculative-config: {key} must be a non-empty list of "
                        "[range_start, range_end, num_speculative_tokens] entries")
    out = []
    for entry in value:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3 or \
                not all(isinstance(x, int) and not isinstance(x, bool) for x in entry):
            raise SpecError(f"--speculative-config: each {key} entry must be 3 integers "
                            f"[range_start, range_end, num_speculative_tokens], got {entry!r}")
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
        raise SpecError("--speculative-config: the first batch-size range must start at 1, so every "
                        "batch size has a k")
    return tuple(out)


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
        raise SpecError(f"--speculative-config is not valid JSON ({e}); give e.g. "
                        '\'{"method": "ngram", "num_speculative_tokens": 3}\'') from None
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
            raise SpecError(f"--speculative-config: draft model {model!r} needs "
                            '"method": "draft_model" (vLLM does not guess it)')
        else:
            raise SpecError(f"--speculative-config: give a method ({', '.join(METHODS)})")
    method = ALIASES.get(method, method)
    if method in NOT_EMULATED:
        raise SpecError(f"--speculative-config: method {method!r} is not emulated; "
                        f"emulated: {', '.join(METHODS)}")
    if method not in METHODS:
        raise SpecError(f"--speculative-config: unknown method {method!r}; valid: {', '.join(METHODS)}")
    if "num_speculative_tokens" not in cfg:
        raise SpecError("--speculative-config: num_speculative_tokens is required")
    k = _positive_int(cfg, "num_speculative_tokens")
    if method in ("eagle", "eagle3", "draft_model") and not model:
        raise SpecError(f"--speculative-config: method {method} needs \"model\" (the draft)")
    lo = _positive_int(cfg, "prompt_lookup_min")
    hi = _positive_int(cfg, "prompt_lookup_max")
    if hi is None:
        lo = hi = lo or 5
    elif lo is None:
        lo = hi
    if lo > hi:
        raise SpecError(f"--speculative-config: prompt_lookup_min {lo} > prompt_lookup_max {hi}")
    schedule = cfg.get("num_speculative_tokens_per_batch_size")
    return SpecConfig(method=method, k=k, model=model, prompt_lookup_min=lo, prompt_lookup_max=hi,
                      schedule=None if schedule is None else _schedule(schedule))
