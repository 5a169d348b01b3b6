"""`loadgen whatif` and `loadgen traces` as jobs: evaluating acceptance traces on a cost
profile (whatif.json), and building traces from a run made with --token-ids."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.errors import LoadgenError
from loadgen.whatif import BATCHES, KS


@dataclass
class WhatIfJob:
    traces: Path
    profile: str  # a cost profile's name (servers/emulator/profiles)
    batches: tuple[int, ...] = tuple(BATCHES)
    ks: tuple[int, ...] = tuple(KS)
    drafters: list[str] | None = None  # None: every drafter the traces have
    oracle_depth: int | None = None  # None: the largest k; 0: no limit
    requests: int | None = None  # per batch size [default: the traces, cycled to >= 4 x batch]
    output: Path | None = None  # also write whatif.json there
    acc_as: str = "eagle"  # the drafter a bare "acc" is
    ngram_lookup: tuple[int, int] = (3, 7)  # prompt lookup min, max to derive a missing n-gram "proposed"
    protocol: str = "closed"  # closed (loop at each batch size) | offline (the study's batches)
    seed: int = 0  # offline: which requests are sampled
    schedule: bool = False  # also a deployment file per drafter: fixed k and the k schedule
    profile_anyway: bool = False  # a profile fitted on another machine used anyway, every output marked


@dataclass
class WhatIf:
    doc: dict  # whatif.json's content
    policies: int
    wall_s: float
    notes: list[str]  # what reading the traces took (repairs, skipped lines), and policies left out
    deployments: dict = field(default_factory=dict)  # with schedule: drafter -> (file text, where written or None)


def whatif(job: WhatIfJob, progress: Callable[[str], None] = lambda _: None) -> WhatIf:
    from loadgen.planning.profiles import held
    from loadgen.whatif import evaluate as ev
    from loadgen.whatif.acceptance_traces import TraceError
    from loadgen.whatif.reading import read
    from loadgen.whatif.results import to_json
    from servers.emulator import profile as profiles

    lo, hi = job.ngram_lookup
    if not 1 <= lo <= hi:
        raise LoadgenError(f"--ngram-lookup {lo},{hi}: give MIN,MAX with 1 <= MIN <= MAX, like 3,7")
    if job.protocol not in ("closed", "offline"):
        raise LoadgenError(f"--protocol {job.protocol!r}: give closed or offline")
    if job.oracle_depth is not None and job.oracle_depth < 0:
        raise LoadgenError(f"--oracle-depth must be >= 0, got {job.oracle_depth}")
    if job.requests is not None and job.requests < 1:
        raise LoadgenError(f"--requests must be >= 1, got {job.requests}")
    depth = max(job.ks) if job.oracle_depth is None else (job.oracle_depth or None)
    mismatch = held(job.profile, job.profile_anyway)
    if mismatch:
        progress(f"PROFILE MISMATCH (--profile-anyway): {mismatch}")
    try:
        prof = profiles.load(job.profile)
        loaded, reading = read(job.traces, acc_as=job.acc_as, ngram_lookup=job.ngram_lookup)
        notes = reading.notes()
        methods = ev.drafters_of(loaded, prof, job.drafters)
        hybrid = ev.hybrid_possible(loaded, methods)
        if not hybrid and "ngram" in methods and len(methods) > 1:
            notes.append(
                "the hybrid policy is left out: some traces have no n-gram 'proposed' and no token "
                "ids to derive it from"
            )
        chosen = ev.candidates(methods, tuple(job.ks), k_max=max(job.ks), oracle_depth=depth, hybrid=hybrid)
        wall = time.monotonic()
        if job.protocol == "offline":
            from loadgen.whatif import offline

            outcomes = offline.evaluate(
                loaded, job.profile, list(job.batches), chosen, requests=job.requests, seed=job.seed, progress=progress
            )
            notes.append(
                "adaptive verification and the k schedule decide each step as the batch is served: "
                "evaluated under the closed protocol only (--protocol closed)"
            )
        else:
            # vLLM's adaptive verification beside fixed k (model drafters: n-gram's drafts carry no
            # probabilities to budget by), then the k schedule the fixed-k results give, each served
            chosen += [ev.adaptive_verification(m, max(job.ks), loaded) for m in methods if m != "ngram"]
            outcomes = ev.evaluate(
                loaded, job.profile, list(job.batches), chosen, requests=job.requests, progress=progress
            )
            outcomes += _schedules_served(loaded, job, methods, outcomes, progress)
    except (profiles.ProfileError, TraceError, ev.WhatIfError) as e:
        raise LoadgenError(str(e)) from None
    wall = time.monotonic() - wall
    doc = to_json(
        loaded,
        methods,
        job.profile,
        outcomes,
        source=str(job.traces),
        ks=list(job.ks),
        oracle_depth=depth,
        protocol=job.protocol,
    )
    doc["input"] = {**reading.to_json(), "notes": notes}
    if mismatch:
        doc["profile_mismatch"] = mismatch
    if job.output is not None:
        try:
            job.output.mkdir(parents=True, exist_ok=True)
            (job.output / "whatif.json").write_text(json.dumps(doc, indent=1))
        except OSError as e:
            raise LoadgenError(
                f"cannot write {job.output / 'whatif.json'}: {e.strerror or e}; choose another --output"
            ) from None
    deployments = _deployments(job, doc, prof) if job.schedule else {}
    return WhatIf(doc, len(chosen), wall, notes, deployments)


def _schedules_served(loaded, job: WhatIfJob, methods: list[str], outcomes: list, progress) -> list:
    """Each drafter's k schedule (from these fixed-k results, loadgen/whatif/schedule.py), served
    as vLLM serves it: each step's k from the requests it scheduled. Speedups against the no
    speculation already served."""
    from dataclasses import asdict, replace

    from loadgen.whatif import evaluate as ev
    from loadgen.whatif.schedule import MAX_BATCH, schedules
    from servers.emulator import profile as profiles

    found = schedules([asdict(o) for o in outcomes], methods, profiles.load(job.profile).models[0])
    chosen = [ev.schedule_policy(m, s["ranges"], MAX_BATCH) for m, s in found.items() if s["ranges"]]
    if not chosen:
        return []
    served = ev.evaluate(loaded, job.profile, list(job.batches), chosen, requests=job.requests, progress=progress)
    base = {o.batch: o.output_tok_s for o in outcomes if o.kind == "none"}
    return [replace(o, speedup=o.output_tok_s / base[o.batch] if base.get(o.batch) else None) for o in served]


def _deployments(job: WhatIfJob, doc: dict, prof) -> dict:
    """Per drafter with a schedule, a deployment file for `loadgen sweep`: no speculation, each
    fixed k evaluated, and the schedule (written as OUTPUT/schedule-METHOD.toml with --output)."""
    from loadgen.whatif.schedule import deployment_toml

    out = {}
    for m, s in doc["schedules"].items():
        if not s["speculative_config"]:
            continue
        text = deployment_toml(
            prof.models[0],
            m,
            s["speculative_config"],
            list(job.ks),
            max_num_seqs=256,
            description=f"{prof.models[0]}: {m} at fixed k and its k schedule from "
            f"loadgen whatif {job.traces} ({doc['protocol']})",
        )
        path = None
        if job.output is not None:
            path = job.output / f"schedule-{m}.toml"
            try:
                path.write_text(text)
            except OSError as e:
                raise LoadgenError(f"cannot write {path}: {e.strerror or e}; choose another --output") from None
        out[m] = (text, path)
    return out


def traces_from_run(
    results: Path,
    output: Path | None = None,
    drafter: tuple[str, int] | None = None,
    ngram_lookup: tuple[int, int] = (5, 5),
) -> tuple[Path, list, list[str]]:
    """Acceptance traces from a run's results, written to `output` (default RESULTS/traces.jsonl):
    (where, the traces, notes for the user)."""
    from loadgen.whatif.acceptance_traces import TraceError, write
    from loadgen.whatif.fromrun import from_results

    try:
        built, notes = from_results(results, drafter=drafter, ngram_lookup=ngram_lookup)
    except TraceError as e:
        raise LoadgenError(str(e)) from None
    path = output or results / "traces.jsonl"
    try:
        write(path, built)
    except OSError as e:
        raise LoadgenError(f"cannot write {path}: {e.strerror or e}; choose another --output") from None
    return path, built, notes
