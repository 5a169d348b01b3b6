"""How a server speaks, apart from how it is started: a `Dialect` is what a client, a scraper
and the emulator need of an engine's server, and nothing of its command line.

- where its Prometheus metrics are (`metrics_path`) and their names by loadgen's key
  (`metrics`: loadgen/load/metric_names.py gathers every dialect's);
- how its speculative-decoding counters turn into loadgen's SD figures over a window
  (`window_sd`: vLLM counts drafts, draft tokens and accepted tokens; SGLang verification
  calls beside the tokens generated; another engine whatever it counts);
- where one request's SD counts are in its response and under which keys (`request_sd`), and
  what a request asks to get them (`request_fields`);
- how it announces itself (`owned_by` in /v1/models, which is how a client tells a running
  server's dialect) and whether it keeps connections alive (`keep_alive`);
- whether the emulator can answer in it (`emulable`: `python -m servers.emulator serve
  --flavor NAME`; its flavors are the emulable dialects).

An engine's module declares its dialect with `speak(Dialect(...))` beside its launcher
(servers/engines/base.py), which names it (`dialect = "..."`). The client side reads dialects
only (by owned_by), never a launcher, and so does the emulator."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

DIALECTS: dict[str, Dialect] = {}


@dataclass(frozen=True)
class Metrics:
    """A dialect's Prometheus sample names, by loadgen's key (loadgen/load/metric_names.py
    lists the keys): counters with their `_total`, gauges, histograms (base name), each key's
    names in the order tried (the current name, then older ones). A key the dialect has no
    metric for is left out and reads as absent."""

    counters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    gauges: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    histograms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestSD:
    """Where one request's speculative-decoding counts are in the dialect's response: the JSON
    keys of the draft tokens proposed, of those accepted and of the verification steps (None:
    not reported), under the object at `path`. `alone`: in a chunk of their own (no choices)
    before the usage chunk, given when a request carries the dialect's `request_fields`;
    else on the usage chunk, as a server flag asks (vLLM's --per-request-spec-decode-metrics).
    `more`: what else the dialect writes there, from the counts (for the emulator)."""

    drafted: str
    accepted: str
    steps: str | None = None
    per_step: str | None = None  # a list of each verify step's accepted drafts (vLLM's `detailed`)
    path: tuple[str, ...] = ()
    alone: bool = False
    more: Callable[[Mapping[str, object]], dict] | None = None


class Counts(Protocol):
    """What a dialect's `window_sd` reads of a window on its server's metrics, by loadgen's key
    and in the dialect's own names: each counter's rise over the window (summed, or by label
    set), whether the server exports it at all, and the window's length."""

    seconds: float

    def present(self, key: str) -> bool: ...

    def total(self, key: str) -> float: ...

    def by_label(self, key: str) -> dict[tuple, float]: ...


def sd_figures(
    seconds: float,
    steps: float,
    draft_tokens: float | None,
    accepted: float,
    per_position: list[float] | None = None,
    past_end_counted: bool = True,
) -> dict:
    """loadgen's SD figures of a window (docs/metrics.md, "Server-side acceptance"), whatever
    shape the counters had: a dialect's `window_sd` turns its counters into these five counts."""
    out = {
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1 + accepted / steps if steps else None,
        "per_position": per_position or [],
        "drafts": steps,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "drafts_per_s": steps / seconds if seconds > 0 else None,
    }
    if not past_end_counted:  # accepted drafts as emitted tokens, without those accepted past max_tokens
        out["past_end_counted"] = False
    return out


def drafts_counted(c: Counts) -> dict | None:
    """The shape vLLM's counters have (llama.cpp's too): drafts (verification steps), draft
    tokens, accepted tokens, and accepted tokens by draft position (label `position`)."""
    if not c.present("spec_drafts"):
        return None
    drafts = c.total("spec_drafts")
    per_pos = c.by_label("spec_accepted_per_pos")
    positions = sorted(per_pos, key=lambda labels: int(dict(labels).get("position", 0)))
    per_position = [per_pos[p] / drafts for p in positions] if drafts else []
    return sd_figures(c.seconds, drafts, c.total("spec_draft_tokens"), c.total("spec_accepted_tokens"), per_position)


@dataclass(frozen=True)
class Dialect:
    name: str  # the emulator's --flavor for it
    owned_by: str | None = None  # /v1/models' owned_by of its servers (None: not told apart)
    keep_alive: bool = True  # False: it closes the connection after every streamed response
    request_fields: Mapping[str, object] = field(default_factory=dict)  # added to every request's body
    metrics_path: str = "/metrics"
    metrics: Metrics = field(default_factory=Metrics)
    request_sd: RequestSD | None = None
    window_sd: Callable[[Counts], dict | None] | None = None  # None: no SD counters
    emulable: bool = True  # the emulator can answer in it (--flavor NAME)


def speak(dialect: Dialect) -> Dialect:
    """Register a dialect under its name (an engine module's, beside its launcher)."""
    if dialect.request_sd is not None and dialect.request_sd.alone and not dialect.request_fields:
        raise TypeError(f"dialect {dialect.name}: per-request SD in a chunk of its own is asked by request_fields")
    DIALECTS[dialect.name] = dialect
    return dialect
