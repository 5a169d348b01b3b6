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

    @property
    def label(self) -> str:
        return f"{self.method} k={self.k}"


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
    return SpecConfig(method=method, k=k, model=model, prompt_lookup_min=lo, prompt_lookup_max=hi)
