"""The report's what-if section, when the results directory holds what-if results
(`whatif.json`, from `loadgen whatif TRACES --output DIR`) or acceptance traces
(`traces.jsonl`, evaluated here on the cost profile of the sweep's model at the sweep's
concurrency levels, and kept as whatif.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from loadgen.report import interactive, plots
from loadgen.report.render import Section
from loadgen.results import store
from loadgen.whatif import BATCHES, KS


def load(
    root: Path, model: str | None, levels: list[int] | None = None, workload: str | None = None
) -> tuple[dict | None, list[str]]:
    """The what-if results for this directory, and notes on where they came from: from
    whatif.json or traces.jsonl, or with `workload` one workload's own (whatif-WORKLOAD.json
    or traces-WORKLOAD.jsonl, what the controls' oracle of that workload is read from)."""
    tag = f"-{workload}" if workload else ""
    done = root / f"whatif{tag}.json"
    if done.is_file():
        try:
            return json.loads(done.read_text()), []
        except ValueError as e:
            return None, [f"{done.name} is unreadable ({e}): no what-if from it; run loadgen whatif again"]
    traces_path = root / f"traces{tag}.jsonl"
    if not traces_path.is_file():
        return None, []
    from loadgen.errors import LoadgenError
    from loadgen.whatif.job import WhatIfJob, whatif
    from servers.emulator import profile as profiles

    name = profiles.for_model(model) if model else None
    if name is None:
        return None, [
            f"{traces_path.name} is here but no cost profile serves {model!r}: run "
            f"loadgen whatif {traces_path} --profile NAME --output {root} to add the what-if section"
        ]
    try:  # as loadgen whatif evaluates them, at the sweep's levels
        doc = whatif(WhatIfJob(traces_path, name, batches=tuple(levels or BATCHES), ks=tuple(KS))).doc
    except LoadgenError as e:
        return None, [f"what-if over {traces_path.name} failed: {e}"]
    store.atomic(done, lambda tmp: Path(tmp).write_text(json.dumps(doc, indent=1)))
    return doc, [f"what-if evaluated here over {traces_path.name} on profile {name} (kept as {done.name})"]


def per_workload(
    root: Path, model: str | None, levels: list[int], workloads: list[str]
) -> tuple[dict[str, dict], list[str]]:
    """Each workload's own what-if results, where the directory has them (whatif-WORKLOAD.json
    or traces-WORKLOAD.jsonl): the controls' oracle differs by workload as acceptance does."""
    out: dict[str, dict] = {}
    notes: list[str] = []
    for w in workloads:
        doc, said = load(root, model, levels, workload=w)
        notes += said
        if doc is not None:
            out[w] = doc
    return out, notes


def table(doc: dict) -> pd.DataFrame:
    """Speedup over no speculation: a row per policy, a column per batch size."""
    res = pd.DataFrame(doc["results"])
    wide = res.pivot_table(index=["policy", "realisable"], columns="batch", values="speedup", sort=False)
    wide.columns = [f"B={b}" for b in wide.columns]
    return wide.reset_index()


def section(doc: dict, out: Path, page_has_plotly: bool = False) -> tuple[Section, pd.DataFrame, Path | None]:
    """The section (its interactive chart for the HTML, the PNG for Markdown), its table, the PNG."""
    res = pd.DataFrame(doc["results"])
    frame = res.assign(variant=res["policy"], workload="traces", level=res["batch"], mode="closed")
    policies = list(dict.fromkeys(res["policy"]))
    colours = plots.colours(policies, "none")
    fig = plots.lines_vs_load(
        frame,
        "speedup",
        "speedup over no speculation (x)",
        "What-if: speedup of each policy over the traces",
        colours,
        out / "whatif.png",
        hline=1.0,
    )
    best = ", ".join(f"B={b}: {p}" for b, p in doc["best_realisable"].items())
    protocol = "offline batches (the study's)" if doc.get("protocol") == "offline" else "closed loop"
    gap = ", ".join(f"B={b}: {g['share']:.0%}" for b, g in doc.get("gap", {}).items() if g["share"] is not None)
    schedules = [
        f"{m}: {json.dumps(s['ranges'])} ([first, last, k] by batch size; as --speculative-config: "
        f"{json.dumps(s['speculative_config'], separators=(',', ':'))})"
        for m, s in doc.get("schedules", {}).items()
        if s.get("ranges")
    ]
    text = "\n".join(
        [
            f"{doc['traces']} acceptance traces ({doc['source']}) replayed in virtual time on the {doc['profile']} "
            f"cost profile, {protocol} at each batch size (docs/whatif.md). Oracles are upper bounds no server "
            "can run; realisable policies could be deployed.",
            f"Best realisable policy per batch size: {best}.",
            *([f"What the best realisable policy gets of the best oracle's throughput: {gap}."] if gap else []),
            *([f"Recommended k schedule (vLLM's num_speculative_tokens_per_batch_size): {s}." for s in schedules]),
            *[f"Note: {n}" for n in doc["notes"] + doc.get("input", {}).get("notes", [])],
        ]
    )
    wide = table(doc)
    chart = interactive.whatif_chart(res, colours, include_js=not page_has_plotly)
    return (
        Section(
            "What-if: fixed k, oracles and combined drafters",
            text,
            [("Speedup over no speculation by batch size", wide, "whatif.csv")],
            [fig] if fig else [],
            chart=chart,
        ),
        wide,
        fig,
    )
