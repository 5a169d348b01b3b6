"""Cost profiles (one TOML file per model and hardware, in profiles/) and acceptance data (one
per model family, in data/): how long an engine step takes and how drafters fare."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from servers.emulator.acceptance import RegimeParams
from servers.emulator.content import CLASSES, ContentParams

PROFILES = Path(__file__).parent / "profiles"
DATA = Path(__file__).parent / "data"


class ProfileError(ValueError):
    pass


@dataclass(frozen=True)
class Forward:
    """One forward pass, in seconds: constant + per_kv_token x KV tokens read + per_batched_token
    x tokens processed; with `weights` (a roofline in two terms, what a real engine's fit needs:
    a step of 1 and of 4 requests cost the same on a CPU, then it grows), the larger of reading
    the weights and computing the tokens: constant + per_kv_token x KV + max(weights,
    per_batched_token x tokens). For a mixture of experts, plus the reads of the routed experts
    that B tokens touch: moe_expert_time x (1 - (1 - top_k/experts)^B)."""

    constant: float
    per_kv_token: float
    per_batched_token: float
    moe_expert_time: float = 0.0
    moe_experts: int = 0
    moe_top_k: int = 0
    weights: float = 0.0

    def time(self, kv_tokens, batched_tokens):
        """Seconds; numbers or numpy arrays (element-wise) alike."""
        compute = self.per_batched_token * batched_tokens
        if self.weights:
            compute = np.maximum(self.weights, compute) * (np.asarray(batched_tokens) > 0)
        t = self.constant + self.per_kv_token * kv_tokens + compute
        if self.moe_expert_time:
            t = t + self.moe_expert_time * (1.0 - (1.0 - self.moe_top_k / self.moe_experts) ** batched_tokens) * (
                batched_tokens > 0
            )
        return t


@dataclass(frozen=True)
class Drafter:
    """What proposing drafts for a step costs. ngram: a share of the verification forward;
    suffix: per_request x requests (CPU work, like n-gram's, but per request); draft_model: k
    forwards of its own model (`draft_forward`: another profile's, or its own inline
    [drafters.draft_model.forward]) over the requests it drafts for; a head (eagle, eagle3,
    mtp): constant x k/fit_k + per_kv_token x KV + per_draft_token x drafts. A profile fitted
    from measured steps (servers/emulator/costfit.py) gives n-gram and suffix the head's terms
    and per_request, and `per_step` a step's cost that does not grow with k: what a step of that
    drafter was measured to cost. `mode_per_step` + `mode_per_token` x tokens: what the engine
    adds to every step while this drafter is configured, drafting or not (vLLM's CPU build
    prefills at twice the time with n-gram configured)."""

    method: str
    acceptance: str | None = None
    constant: float = 0.0
    per_kv_token: float = 0.0
    per_draft_token: float = 0.0
    fit_k: int = 3
    verify_fraction: float = 0.0
    per_request: float = 0.0
    per_step: float = 0.0  # a fitted profile's: seconds a step in which any request drafts, whatever k
    draft_forward: Forward | None = None
    mode_per_step: float = 0.0
    mode_per_token: float = 0.0

    def mode_time(self, batched_tokens):
        """Seconds the engine adds to a step of `batched_tokens` while this drafter is configured."""
        return (self.mode_per_step + self.mode_per_token * batched_tokens) * (np.asarray(batched_tokens) > 0)

    def time(self, k, requests, kv_tokens, verify_time, drafts=None):
        """Seconds to propose k drafts for each of `requests` over `kv_tokens`; numbers or numpy
        arrays (element-wise) alike; 0 where k or requests is 0. `drafts`: the drafts proposed
        in all, where requests propose different numbers (an n-gram's match may offer fewer
        than k): the per-draft cost is of those, k the deepest."""
        if self.draft_forward is not None:
            t = k * self.draft_forward.time(kv_tokens, requests)
        else:
            total = requests * k if drafts is None else drafts
            t = self.constant * k / self.fit_k + self.per_kv_token * kv_tokens + self.per_draft_token * total
        if self.method == "ngram":
            t = t + self.verify_fraction * verify_time
        if self.draft_forward is None:
            t = t + self.per_request * requests
        return (t + self.per_step) * ((k > 0) & (requests > 0))


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    models: tuple[str, ...]
    forward: Forward
    step_overhead: float
    kv_capacity_tokens: int
    max_model_len: int
    drafters: dict[str, Drafter]
    tensor_parallel_size: int
    data: dict = field(repr=False)
    own: dict = field(default_factory=dict, repr=False)  # [acceptance_fitted.METHOD.CLASS]: the model's own
    machine: dict = field(default_factory=dict)  # [machine]: where its costs were measured (fingerprint.py)
    data_models: tuple[str, ...] = ()  # the models the acceptance data file describes

    def content(self, cls: str) -> ContentParams:
        section = self.data.get("content", {})
        return ContentParams(**section.get(cls) or section["chat"])

    def thinking(self, cls: str) -> ContentParams:
        """What a thinking model's chain of thought for this kind of request is made of
        (docs/emulator.md, "Reasoning models")."""
        section = self.data.get("thinking", {})
        params = section.get(cls) or section.get("default")
        if params is None:
            raise ProfileError(f"profile {self.name!r} has no [thinking] content: it cannot serve a reasoning model")
        return ContentParams(**params)

    def _lookup(self, method: str, cls: str) -> tuple[dict | None, str]:
        """A drafter's acceptance parameters for a kind of request, and where they came from: the
        profile's own [acceptance_fitted.METHOD.CLASS] first (`loadgen fit`), then the data file's table (its
        class, `default`, the table it `shares`, `chat`)."""
        own = self.own.get(method, {})
        if own.get(cls):
            return own[cls], "own"
        name = self.drafters[method].acceptance
        table, via = self.data.get(name or "", {}), name or ""
        params = table.get(cls) or table.get("default")
        while params is None and isinstance(table.get("shares"), str):
            via = table["shares"]
            table = self.data.get(via, {})
            params = table.get(cls) or table.get("default")
        return params or table.get("chat"), via

    def acceptance(self, method: str, cls: str) -> RegimeParams:
        params, _ = self._lookup(method, cls)
        if params is None:
            raise ProfileError(f"profile {self.name!r} has no acceptance data for {method}")
        return RegimeParams(**params)

    def acceptance_note(self, method: str, cls: str) -> str | None:
        """In words, when a drafter's acceptance for this kind of request is not its own: shared
        with another head (no source separates them) or borrowed from another model's data. None
        when it is the model's own (fitted by `loadgen fit`, or the data file describes it)."""
        if method not in self.drafters or self.drafters[method].acceptance is None:
            return None
        _, via = self._lookup(method, cls)
        if via == "own":
            return None
        said = []
        if via != self.drafters[method].acceptance:
            said.append(f"shares {via}'s (no source separates them)")
        if not set(self.models) & set(self.data_models):
            said.append(f"borrowed from {self.data_models[0] if self.data_models else 'another model'}'s data")
        return f"{method} acceptance on {cls}: {', '.join(said)}" if said else None


def available() -> list[str]:
    return sorted(p.stem for p in PROFILES.glob("*.toml"))


def _forward(d: dict, where: str) -> Forward:
    try:
        return Forward(**d)
    except TypeError as e:
        raise ProfileError(f"{where}: bad [forward] section: {e}") from None


@cache
def load(name: str) -> Profile:
    """A profile by name (profiles/NAME.toml), or a profile file of one's own (a path ending in
    .toml: one bench/cpu_profile.py fitted, say)."""
    path = Path(name) if name.endswith(".toml") else PROFILES / f"{name}.toml"
    if name.endswith(".toml") and not path.is_file():
        raise ProfileError(f"profile file {name!r} not found; give a .toml file or one of: {', '.join(available())}")
    if not path.is_file():
        raise ProfileError(f"unknown profile {name!r}; available: {', '.join(available())}")
    raw = tomllib.loads(path.read_text())
    data_path = DATA / f"{raw['acceptance']}.toml"
    data = tomllib.loads(data_path.read_text())
    drafters = {}
    for method, d in raw.get("drafters", {}).items():
        d = dict(d)
        draft_forward = load(d.pop("profile")).forward if "profile" in d else None
        if isinstance(d.get("forward"), dict):
            draft_forward = _forward(d.pop("forward"), f"{name} [drafters.{method}.forward]")
        drafters[method] = Drafter(method=method, draft_forward=draft_forward, **d)
    return Profile(
        name=name,
        description=raw["description"],
        models=tuple(raw["models"]),
        forward=_forward(raw["forward"], name),
        step_overhead=raw["step"]["overhead"],
        kv_capacity_tokens=int(raw["kv_capacity_tokens"]),
        max_model_len=int(raw["max_model_len"]),
        drafters=drafters,
        tensor_parallel_size=int(raw.get("tensor_parallel_size", 1)),
        data=data,
        own=raw.get("acceptance_fitted", {}),
        machine=dict(raw.get("machine", {})),
        data_models=tuple(data.get("models", ())),
    )


def for_model(model: str) -> str | None:
    """The profile whose `models` list names this model, if any."""
    for name in available():
        if model in load(name).models:
            return name
    return None


def check(profile: Profile) -> None:
    """Every kind of request has content parameters."""
    missing = [c for c in CLASSES if c not in profile.data.get("content", {})]
    if missing:
        raise ProfileError(f"profile {profile.name!r}: no content parameters for {', '.join(missing)}")
