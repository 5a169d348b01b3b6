"""The script a scripted server follows: for each request, exactly when each chunk is written
and how many tokens it carries. Pure functions, so a test can compute the truth it measures
against from the same request.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

FAULTS = (
    "ok",  # a normal stream
    "http400_json",  # 400 with an OpenAI-style JSON error body
    "http500_html",  # 500 with an HTML body
    "http429",  # 429 rate limited, JSON body, Retry-After
    "disconnect",  # connection closed before any response
    "reset",  # a few chunks, then the TCP connection is reset
    "malformed_sse",  # a line that is not SSE in the middle of the stream
    "invalid_json",  # a data event whose JSON is cut off
    "missing_done",  # the whole stream except `data: [DONE]`
    "stall",  # first chunk, then silence
    "stream_error",  # an error event in the middle of the stream
    "empty",  # a well-formed stream with no tokens
)

# The scripted "model" vocabulary: every generated token is one of these words.
WORDS = (
    "alpha",
    "be",
    "cat",
    "delta",
    "echo",
    "fig",
    "golf",
    "hotel",
    "in",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "no",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
)


@dataclass(frozen=True, slots=True)
class ScriptConfig:
    """How the server times its responses.

    chunk_tokens: "1" (one token per chunk), a comma list cycled ("1,3,2"), or
    "sd:K:ALPHA" (speculative-decoding-like: 1 + accepted drafts, each of K drafts accepted
    with probability ALPHA while the previous ones were).
    """

    ttft_ms: float = 30.0
    prefill_us_per_token: float = 20.0
    step_ms: float = 20.0
    step_jitter: float = 0.0
    chunk_tokens: str = "sd:3:0.7"
    events_per_write: int = 1
    seed: int = 0
    faults: tuple[str, ...] = ("ok",)
    fault_after_chunks: int = 2
    # a fault answered before any stream (400, 500, 429, disconnect) comes this long after the
    # request: a failing server's own pace, so a test's failure rate is not the machine's speed
    fault_delay_ms: float = 0.0
    stall_s: float = 3600.0
    # every duration above taken this many times as long in real time (time dilation, as the
    # emulator's --time-scale: loadgen reads it from /metrics and converts back; docs/metrics.md)
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError("time_scale must be > 0")
        if self.fault_delay_ms < 0:
            raise ValueError("fault_delay_ms must be >= 0")
        bad = [f for f in self.faults if f not in FAULTS]
        if bad:
            raise ValueError(f"unknown fault {bad[0]!r}; valid: {', '.join(FAULTS)}")
        if self.events_per_write < 1:
            raise ValueError("events_per_write must be >= 1")
        if not 0.0 <= self.step_jitter < 1.0:
            raise ValueError("step_jitter must be in [0, 1)")
        _token_pattern(self.chunk_tokens)  # validate


@dataclass(frozen=True, slots=True)
class Script:
    """The truth for one request: first chunk at `ttft_s` after the request was received,
    chunk i (i >= 1) `gaps_s[i-1]` after chunk i-1, carrying `tokens[i]` tokens."""

    ttft_s: float
    tokens: tuple[int, ...]
    gaps_s: tuple[float, ...]
    words: tuple[str, ...] = field(repr=False)

    @property
    def completion_tokens(self) -> int:
        return sum(self.tokens)

    def offsets_s(self) -> list[float]:
        """Time of each chunk after the request was received."""
        out = [self.ttft_s]
        for g in self.gaps_s:
            out.append(out[-1] + g)
        return out

    def token_itl_s(self) -> list[float]:
        """True per-token inter-token latency: each gap spread over its chunk's tokens; the
        extra tokens of the first chunk arrive with it (0)."""
        out = [0.0] * (self.tokens[0] - 1)
        for g, n in zip(self.gaps_s, self.tokens[1:]):
            out.extend([g / n] * n)
        return out

    def tpot_s(self) -> float | None:
        n = self.completion_tokens
        return sum(self.gaps_s) / (n - 1) if n > 1 else None


def _token_pattern(spec: str):
    spec = spec.strip()
    if spec.startswith("sd:"):
        try:
            _, k_text, alpha_text = spec.split(":")
            k, alpha = int(k_text), float(alpha_text)
        except ValueError:
            raise ValueError(f"chunk_tokens {spec!r}: expected sd:K:ALPHA, e.g. sd:3:0.7") from None
        if k < 1 or not 0.0 <= alpha <= 1.0:
            raise ValueError(f"chunk_tokens {spec!r}: need K >= 1 and 0 <= ALPHA <= 1")
        return ("sd", k, alpha)
    try:
        cycle = tuple(int(x) for x in spec.split(","))
    except ValueError:
        raise ValueError(f"chunk_tokens {spec!r}: expected '1', a list like '1,3,2', or sd:K:ALPHA") from None
    if not cycle or min(cycle) < 1:
        raise ValueError(f"chunk_tokens {spec!r}: counts must be >= 1")
    return ("cycle", cycle)


def prompt_key(text: str) -> str:
    """A short stable digest of a prompt, to pair server traces with client records."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def prompt_token_count(text: str) -> int:
    """The scripted 'tokenizer': one token per whitespace-separated word."""
    return len(text.split())


def script_for(cfg: ScriptConfig, prompt_text: str, max_tokens: int) -> Script:
    """The deterministic script for a request with this prompt text and `max_tokens`."""
    digest = hashlib.blake2b(f"{cfg.seed}\0{prompt_text}".encode(), digest_size=8).digest()
    rng = random.Random(int.from_bytes(digest, "little"))
    pattern = _token_pattern(cfg.chunk_tokens)
    tokens = [1]  # the prefill step emits one token
    left = max_tokens - 1
    i = 0
    while left > 0:
        if pattern[0] == "sd":
            _, k, alpha = pattern
            accepted = 0
            while accepted < k and rng.random() < alpha:
                accepted += 1
            n = accepted + 1
        else:
            n = pattern[1][i % len(pattern[1])]
        n = min(n, left)
        tokens.append(n)
        left -= n
        i += 1
    step = cfg.step_ms / 1e3 * cfg.time_scale
    gaps = tuple(step * (1.0 + cfg.step_jitter * (2.0 * rng.random() - 1.0)) for _ in tokens[1:])
    ttft = (cfg.ttft_ms / 1e3 + cfg.prefill_us_per_token * 1e-6 * prompt_token_count(prompt_text)) * cfg.time_scale
    words = tuple(WORDS[rng.randrange(len(WORDS))] for _ in range(max_tokens))
    return Script(ttft_s=ttft, tokens=tuple(tokens), gaps_s=gaps, words=words)
