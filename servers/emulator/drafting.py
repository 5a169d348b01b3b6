"""What the engine's drafter proposes for a request and how much of it the target accepts.

- n-gram: vLLM's prompt lookup over the request's own tokens (ngram.py), checked against the
  emulated model's output token by token;
- suffix: suffix trees over the prompt and earlier outputs (suffix.py), checked the same way;
- a model drafter (EAGLE, EAGLE-3, a draft model, MTP): k drafts whose acceptance at each
  position is drawn per request (acceptance.py);
- rejection_sample_method "synthetic" (any drafter): the drafter proposes as it would, and
  each proposed draft is accepted with the conditional rate of its position until the first
  rejection, as vLLM's rejection sampler does in synthetic mode, whatever the draft says.

Per request, when the server reports it (`--per-request-spec-decode-metrics`), the counts vLLM
keeps in RequestSpecDecodeMetrics (`RequestSD`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servers.emulator import content, ngram
from servers.emulator.acceptance import DEPTH, acceptance_draws
from servers.emulator.ngram import NgramIndex
from servers.emulator.profile import Profile
from servers.emulator.spec import SpecConfig
from servers.emulator.suffix import SuffixCache

LEVELS = ("none", "summary", "detailed")


@dataclass(slots=True)
class RequestSD:
    """vLLM's RequestSpecDecodeMetrics: a histogram of accepted drafts per verify step
    (length num_spec_tokens + 1), the drafts proposed, and with `detailed` the per-step lists."""

    num_spec_tokens: int
    detailed: bool = False
    histogram: list[int] = field(default_factory=list)
    num_draft_tokens: int = 0
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)
    decode_steps: int = 0  # every decoding step, drafts or none (SGLang's spec_verify_ct)

    def __post_init__(self) -> None:
        if not self.histogram:
            self.histogram = [0] * (self.num_spec_tokens + 1)

    def observe(self, drafted: int, accepted: int) -> None:
        self.histogram[accepted] += 1
        self.num_draft_tokens += drafted
        if self.detailed:
            self.per_step_accepted.append(accepted)
            self.per_step_drafted.append(drafted)

    def to_dict(self) -> dict:
        """The response's `metrics.speculative_decoding`, as vLLM's to_dict builds it."""
        steps = sum(self.histogram)
        accepted = sum(j * c for j, c in enumerate(self.histogram))
        out = {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / self.num_draft_tokens if self.num_draft_tokens else 0.0,
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": self.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
        }
        if self.per_step_accepted:
            out["per_step_accepted"] = list(self.per_step_accepted)
            out["per_step_drafted"] = list(self.per_step_drafted)
        return out


class Drafting:
    def __init__(self, profile: Profile, spec: SpecConfig, seed: int, per_request: str = "none") -> None:
        if per_request not in LEVELS:
            raise ValueError(
                f"--per-request-spec-decode-metrics must be one of {', '.join(LEVELS)}, got {per_request!r}"
            )
        self.profile, self.spec, self.seed, self.per_request = profile, spec, seed, per_request
        self.conditional = spec.conditional_rates
        self.suffix = (
            SuffixCache(
                spec.suffix_max_tree_depth,
                spec.suffix_max_cached_requests,
                spec.suffix_max_spec_factor,
                spec.suffix_min_token_prob,
            )
            if spec.method == "suffix"
            else None
        )

    def start(self, seq, prompt_text: str) -> None:
        spec = self.spec
        if spec.method == "ngram":
            seq.ngram = NgramIndex(spec.prompt_lookup_min, spec.prompt_lookup_max, seq.prompt).prepare()
        elif self.suffix is not None:
            self.suffix.start(seq.request_id, seq.prompt)
        elif self.conditional is None:
            seq.acc, seq.confidence = acceptance_and_confidence(
                self.profile, self.seed, spec.method, len(seq.output), spec.k, prompt_text, seq.kind, seq.reasoning_end
            )
        if self.conditional is not None:
            seq.rng = content.rng_for(self.seed, "synthetic\0" + prompt_text)
        if self.per_request != "none":
            seq.sd = RequestSD(spec.k, detailed=self.per_request == "detailed")

    def propose(self, seq, new_tokens: list[int], k: int):
        """The drafts for the sequence's next step: tokens (n-gram, suffix) or a count."""
        if seq.ngram is not None:
            seq.ngram.extend(new_tokens)
            return seq.ngram.propose(k) if k > 0 else []
        if self.suffix is not None:
            self.suffix.extend(seq.request_id, new_tokens)
            return self.suffix.propose(seq.request_id, k) if k > 0 else []
        return max(k, 0)

    def confidence(self, seq, k: int) -> np.ndarray | None:
        """The conditional chance of each of the sequence's next k drafts being accepted, as a
        calibrated drafter would estimate it (adaptive verification's input); None for n-gram
        and suffix, which have no draft probabilities."""
        if self.conditional is not None:
            return np.asarray(self.conditional[:k], dtype=np.float64)
        if seq.confidence is None:
            return None
        return confidence(seq.confidence, seq.emitted, k)

    def accepted(self, seq, drafts: int) -> int:
        """How many of the sequence's `drafts` drafts the target accepts."""
        if self.conditional is not None:
            u = seq.rng.random(drafts)
            accepted = 0
            for pos in range(drafts):
                if u[pos] >= self.conditional[pos]:
                    break
                accepted += 1
            return accepted
        pos = seq.emitted
        if seq.acc is not None:
            return min(int(seq.acc[pos]) - 1, drafts)
        accepted = 0
        truth = seq.output[pos : pos + drafts]
        if len(truth) < drafts:  # the last step: its drafts past max_tokens are checked too (vLLM counts them)
            truth = truth + seq.beyond[: drafts - len(truth)]
        for d, tok in zip(seq.drafts, truth):
            if d != tok:
                break
            accepted += 1
        return accepted

    def finish(self, seq) -> None:
        if self.suffix is not None:
            self.suffix.finish(seq.request_id)


def acceptance(
    profile: Profile, seed: int, method: str, n: int, k: int, prompt_text: str, kind: str, thinking: int = 0
) -> np.ndarray:
    """A model drafter's acceptance over a request: drawn from (seed, prompt), the same draws at
    every k (acceptance.py), so the same request is as easy at any k. A thinking model's first
    `thinking` positions (its thought) are drawn with the drafter's thinking parameters, the
    answer's after them with its kind's."""
    return acceptance_and_confidence(profile, seed, method, n, k, prompt_text, kind, thinking)[0]


def acceptance_and_confidence(
    profile: Profile, seed: int, method: str, n: int, k: int, prompt_text: str, kind: str, thinking: int = 0
) -> tuple[np.ndarray, list[tuple[int, np.ndarray, float]]]:
    """`acceptance`, and what a calibrated drafter's confidence in each draft would be: per
    part of the output (the thought, the answer), (its first position, each position's chance
    that a first draft for it is right, the factor for every later draft) (`confidence`)."""
    acc_rng = content.rng_for(seed, "acceptance\0" + prompt_text)
    if thinking <= 0:
        params = profile.acceptance(method, kind)
        acc, rate = acceptance_draws(n, k, params, acc_rng)
        return acc, [(0, rate, params.depth_factor)]
    head = min(thinking, n)
    think_rng = content.rng_for(seed, "acceptance-thinking\0" + prompt_text)
    think, answer = profile.acceptance(method, "thinking"), profile.acceptance(method, kind)
    acc_think, rate_think = acceptance_draws(head, k, think, think_rng)
    acc_answer, rate_answer = acceptance_draws(n - head, k, answer, acc_rng)
    parts = [(0, rate_think, think.depth_factor), (head, rate_answer, answer.depth_factor)]
    return np.concatenate([acc_think, acc_answer]), parts


def confidence(parts: list[tuple[int, np.ndarray, float]], pos: int, k: int) -> np.ndarray:
    """The conditional chance that each of k drafts from output position `pos` is accepted
    once the ones before it were: the draws' own probabilities (acceptance.acceptance_draws)."""
    start, rate, depth = parts[0]
    for part in parts[1:]:
        if pos >= part[0]:
            start, rate, depth = part
    i = pos - start
    out = np.zeros(k, dtype=np.float64)
    window = rate[i : i + k]
    out[: len(window)] = window
    out[1:] *= depth
    return out


def exact_trace(profile: Profile, spec: SpecConfig | None, seed: int, seq, prompt_text: str) -> dict:
    """Per drafter of the profile, the tokens a step starting at each output position would
    emit (at most the tokens left): model drafters as drawn for this request (DEPTH drafts
    deep, so a value of DEPTH + 1 means at least that), the n-gram drafter by running its
    lookup over the tokens (the served settings, else prompt_lookup_min = max = 5), with
    how many drafts it has to offer at each position. (Suffix decoding depends on the other
    requests served before, so it has no trace of its own.)"""
    n = len(seq.output)
    rest = n - np.arange(n)
    out: dict = {}
    for method in profile.drafters:
        if method == "suffix":
            continue
        if method == "ngram":
            lo, hi = (
                (spec.prompt_lookup_min, spec.prompt_lookup_max)
                if spec is not None and spec.method == "ngram"
                else (5, 5)
            )
            acc, offered = ngram.acceptance_lengths(
                seq.prompt, seq.output, min_n=lo, max_n=hi, k=max(1, n), with_matches=True
            )
            out[method] = {
                "acc_len": np.minimum(acc, rest).tolist(),
                "proposed": offered,
                "source": f"exact: the emulator's prompt lookup {lo}..{hi}",
            }
        else:
            acc = acceptance(profile, seed, method, n, DEPTH, prompt_text, seq.kind, seq.reasoning_end)
            out[method] = {
                "acc_len": np.minimum(acc, rest).tolist(),
                "censored_at": DEPTH,
                "source": f"exact: the emulator's draws, {DEPTH} drafts deep",
            }
    return out
