"""`loadgen sweep --virtual --traces-from DIR[,DIR...]`: predict a cell from cells that are not it.

A prediction of a cell may read the profile, the workload's requests, and what other cells of
real sweeps (run with --token-ids) recorded of the same requests; never anything of the cell
it predicts. For each cell (variant, workload, level) the source is another cell of the same
workload in DIR: the requests' prompt and output token ids come from it (a greedy model writes
the same answer to the same prompt at any load), and the variant's acceptance at every position
from it, as its drafter works:

- no drafter: any cell (only the tokens);
- n-gram: any cell (vLLM's prompt lookup replayed over the ids is exact, whoever served them);
- a model drafter: a cell of the same method (its acceptance estimated from the tokens each step
  emitted, loadgen.whatif.fromrun: censored at that cell's k), at the same k on another level
  first (the nearest), else at another k (beyond the source's k an extrapolation, and said).

Only sweeps of the same model are read (the manifest's deployment model). A source cell is never
the predicted one: a cell of the same workload, level and speculative
configuration (whatever its variant's name) is not a candidate, so removing the predicted cell's
results from DIR changes nothing (tests/test_predicted.py). Where no source has what a variant
needs, the cell is priced on the profile's own acceptance and the workload's lengths, and says
so. Each cell records its source (summary["config"]["prediction"]); `--replay` is the other
thing: re-pricing a measured cell with its own work, never called a prediction."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from loadgen.planning.plan import Cell, Plan
from loadgen.whatif.fromrun import configured

NO_DRAFT = (None, 0)


@dataclass(frozen=True)
class Source:
    directory: Path
    key: str
    workload: str
    level: float
    method: str | None
    k: int

    @property
    def path(self) -> Path:
        return self.directory / "cells" / self.key


def sources(directories: list[str], model: str | None = None) -> list[Source]:
    """Every finished ok cell of the sweeps that kept token ids, with its drafter and k; with
    `model`, of the sweeps that served that model only (another model's answers are not this one's)."""
    out = []
    for d in map(Path, directories):
        try:
            served = json.loads((d / "manifest.json").read_text()).get("deployment", {}).get("model")
        except (OSError, ValueError, AttributeError):
            continue
        if model is not None and served != model:
            continue
        for path in sorted((d / "cells").glob("*/*/*/summary.json")):
            try:
                s = json.loads(path.read_text())
                cell, config = s["cell"], s.get("config") or {}
            except (OSError, ValueError, KeyError):
                continue
            if cell.get("status") != "ok" or not (path.parent / "requests.parquet").is_file():
                continue
            method, k = configured(config)
            key = f"{cell['variant']}/{cell['workload']}/{path.parent.name}"
            out.append(Source(d, key, cell["workload"], float(cell["level"]), method, k))
    return out


def choose(found: list[Source], workload: str, level: float, method: str | None, k: int) -> tuple[Source | None, str]:
    """The source for a cell of `workload` at `level` under (method, k), and why, in words."""
    mine = [s for s in found if s.workload == workload and not (s.level == level and (s.method, s.k) == (method, k))]
    far = lambda s: (abs(s.level - level), s.level)  # noqa: E731

    if method is None or method == "ngram":
        pick = min(mine, key=lambda s: (s.level, s.key), default=None)
        how = "its tokens" if method is None else "n-gram acceptance replayed exactly over its tokens"
        return pick, how
    same = sorted((s for s in mine if s.method == method and s.k == k), key=far)
    if same:
        return same[0], f"{method} acceptance estimated from its steps at the same k {k}"
    other = sorted((s for s in mine if s.method == method), key=lambda s: (abs(s.k - k), *far(s)))
    if other:
        s = other[0]
        extra = f" (beyond {s.k} drafts an extrapolation)" if s.k < k else ""
        return s, f"{method} acceptance estimated from its steps at k {s.k}{extra}"
    return None, f"no cell of {workload} drafted with {method}"


def predicted(plan: Plan, cell: Cell, engine, workload):
    """(engine, submit, requests, prediction) for the cell, from its source; prediction: the
    record of where its work and acceptance came from (the cell's summary keeps it)."""
    from loadgen.sweep.simulated import served_traces
    from loadgen.whatif.acceptance_traces import TraceError
    from loadgen.whatif.fromrun import from_results

    spec = engine.spec
    method, k = (spec.method, spec.k) if spec is not None else NO_DRAFT
    found = sources(plan.traces_from or [], plan.deployment_object().model)
    src, how = choose(found, cell.workload, float(cell.level), method, k)
    if src is None:
        return (
            engine,
            None,
            workload,
            {"source": None, "how": f"{how}: the profile's acceptance, the workload's lengths"},
        )
    lookup = (spec.prompt_lookup_min, spec.prompt_lookup_max) if method == "ngram" else (5, 5)
    drafter = (method, src.k) if method is not None and method != "ngram" else None
    try:
        traces, notes = from_results(src.path, drafter=drafter, ngram_lookup=lookup)
    except TraceError as e:
        raise ValueError(f"--traces-from: cell {src.key}: {e}") from None
    eng, submit, served = served_traces(engine, {t.id: t for t in traces}, workload)
    record = {"source": f"{src.directory}/cells/{src.key}", "how": how, "requests": len(traces)}
    planned = plan.requests_for(cell)
    if planned is not None and len(traces) < planned:
        record["note"] = f"{len(traces)} of the {planned} planned requests have a source: the cell serves those"
    return eng, submit, served, record
