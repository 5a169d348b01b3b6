"""The study's execution-time breakdown (paper.md, section 3.2: verification 42-95% of SD time)
per SD cell: the share of the engine's step time spent drafting, verifying the accepted tokens,
verifying the rejected drafts, and the rest (docs/metrics.md, "Time breakdown"). The steps are
the cell's own, read off its chunk times (loadgen.measures.enginesteps, the server's
per-request SD counts where it gave them); what each part of a step cost is the cost profile's
(servers/emulator/costfit.py prices it). So it needs a profile of the deployment's model and
hardware: the one its emulator was given (--profile in its command line), the one a virtual cell
ran on, or the catalog's for its model (servers/emulator/profiles/; a fitted one, e.g.
cpu-qwen2.5-coder-1.5b, names its served model); without one, the section says so.
`modelled_over_measured` says how much of the measured step time the profile explains."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from loadgen.measures.enginesteps import engine_steps


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def variant_spec(manifest: dict, variant: str) -> tuple[str, int] | None:
    """(method, k) of the variant's speculative config, from the command the sweep ran."""
    argv = list(((manifest.get("servers") or {}).get(variant) or {}).get("argv") or [])
    text = _flag(argv, "--speculative-config")
    try:
        d = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("num_speculative_tokens"), int):
        return None
    from servers.emulator.spec import ALIASES

    method = ALIASES.get(d.get("method") or "", d.get("method"))
    return (method, d["num_speculative_tokens"]) if method else None


def profile_of(sw) -> tuple[Any, str]:
    """The cost profile that prices the sweep's steps, and where it came from in words."""
    from servers.emulator import profile as profiles

    for v in (sw.manifest.get("servers") or {}).values():
        given = _flag(list(v.get("argv") or []), "--profile")
        if given:
            return _load(profiles, given, "its emulator's --profile")
    for s in sw.summaries.values():
        given = (s.get("config") or {}).get("profile") if isinstance(s, dict) else None
        if given:
            return _load(profiles, str(given), "the profile its cells were simulated on")
    served = [v.get("served_model_name") for v in (sw.manifest.get("servers") or {}).values()]
    for model in dict.fromkeys([*(m for m in served if m), sw.model]):
        name = profiles.for_model(model) if model else None
        if name:
            return _load(profiles, name, f"the catalog's profile for {model}")
    return None, "no cost profile names this deployment's model"


def _load(profiles, name: str, where: str):
    try:
        return profiles.load(name), f"{where} ({name})"
    except (profiles.ProfileError, OSError, KeyError, ValueError) as e:
        return None, f"{where} ({name}) could not be read: {e}"


def table(sw) -> tuple[pd.DataFrame, str]:
    """One row per ok SD cell whose drafter the profile prices: its shares; and the profile's
    provenance in words."""
    from servers.emulator import costfit

    prof, where = profile_of(sw)
    rows: list[dict] = []
    if prof is None or not len(sw.ok):
        return pd.DataFrame(rows), where
    for r in sw.ok.itertuples():
        spec = variant_spec(sw.manifest, r.variant)
        frame = sw.requests(r.path)
        if spec is None or spec[0] not in prof.drafters or frame is None or "chunk_t_ns" not in frame:
            continue
        measured = frame[~frame["warmup"].astype(bool)] if "warmup" in frame else frame
        steps = engine_steps(measured, spec[1])
        if not len(steps):
            continue
        b = costfit.breakdown(steps, prof.forward, prof.drafters[spec[0]], spec[1], prof.step_overhead)
        rows.append(
            {
                "workload": r.workload,
                "variant": r.variant,
                "level": r.level,
                "drafting": b["drafting_share"],
                "verifying_accepted": b["verify_accepted_share"],
                "verifying_rejected": b["verify_rejected_share"],
                "rest": b["rest_share"],
                "steps": b["steps"],
                "modelled_over_measured": b["modelled_s"] / b["measured_s"] if b["measured_s"] else None,
            }
        )
    return pd.DataFrame(rows), where
