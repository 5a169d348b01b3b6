"""The report built (`loadgen report DIR`, docs/report.md). Data flows
one way: results directory (data.py) -> tables (tables.py) -> figures (plots.py) -> report.md,
report.html (render.py), with every table also written as CSV and parquet."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.config import sampling_label
from loadgen.report import breakdown, controls, decision, goodput, interactive, overtime, phases, plots, tables, whatif
from loadgen.report.numbers import num, short
from loadgen.report.render import Section, markdown, page
from loadgen.results import store
from loadgen.results.reading import ReportError, Sweep, read

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Built", "ReportError", "build"]


@dataclass
class Built:
    out: Path
    html: Path
    markdown: Path
    figures: list[Path]
    tables: dict[str, Path]
    notes: list[str]


def _cost_per_token(model: str | None) -> tuple[float | None, str | None]:
    """The per-batched-token forward cost of the model's emulator cost profile, if it has one."""
    if not model:
        return None, None
    from servers.emulator import profile

    name = profile.for_model(model)
    return (profile.load(name).forward.per_batched_token, name) if name else (None, None)


def _notes(sw: Sweep) -> list[str]:
    notes = []
    if sw.missing:
        notes.append(
            f"{len(sw.missing)} of {len(sw.planned)} planned cells are missing (not run yet): "
            + ", ".join(sw.missing[:8])
            + (" ..." if len(sw.missing) > 8 else "")
        )
    failed = sw.cells[sw.cells["status"] != "ok"]
    if len(failed):
        notes.append(f"{len(failed)} cell(s) failed and are left out: " + ", ".join(failed["path"]))
    if sw.unreadable:
        notes.append(f"{len(sw.unreadable)} cell(s) could not be read and are left out: " + ", ".join(sw.unreadable))
    for col, what in (
        ("client_bound", "the client was the bottleneck (client_bound)"),
        ("server_behind", "the emulator fell behind real time (server_behind)"),
        ("short_of_users", "fewer requests were ever in flight than the cell's users (short_of_users)"),
    ):
        if col in sw.ok and sw.ok[col].fillna(False).astype(bool).any():
            n = int(sw.ok[col].fillna(False).astype(bool).sum())
            notes.append(
                f"In {n} cell(s) {what}: their throughput understates the server; each is "
                "marked in the tables' flags column and drawn as a cross on the chart."
            )
    scaled = sw.ok[sw.ok["time_scale"].fillna(1.0) != 1.0] if "time_scale" in sw.ok else sw.ok.iloc[:0]
    if len(scaled):
        per_level = scaled.groupby("level")["time_scale"].max()
        notes.append(
            "The emulated GPU ran slower than its model where this machine could not keep its pace (time "
            "scale " + ", ".join(f"{num(s)}x at {short(lv)}" for lv, s in per_level.items()) + "); every figure is "
            "converted back into the emulated hardware's time, so speedups and latencies are its own "
            "(docs/metrics.md, time dilation)."
        )
    if sw.ok.empty:
        notes.append("No cell finished successfully: there is nothing to compare.")
    return notes


def _cell_flags(sw: Sweep):
    """Each cell's keys and its flags as text (decision.FLAGS; '' for none)."""
    return sw.ok[tables.KEYS].assign(flags=decision.flags(sw.ok).to_numpy())


def _flagged(frame, cell_flags):
    """A per-cell table with each cell's flags (`_cell_flags`) as its last column."""
    keys = tables.KEYS
    if frame.empty or not all(k in frame for k in keys) or "flags" in frame:
        return frame
    return frame.merge(cell_flags, on=keys, how="left").assign(flags=lambda x: x["flags"].fillna(""))


def _baseline_flags(sp, cell_flags, baseline: str):
    """A speedup's flags: its own cell's and its baseline cell's ("baseline client_bound"), as
    either one understates the ratio (the console's '!' says the same)."""
    if sp.empty or "flags" not in sp:
        return sp
    base = cell_flags[cell_flags["variant"] == baseline].drop(columns="variant").rename(columns={"flags": "base"})
    out = sp.merge(base, on=["workload", "mode", "level"], how="left")

    def join(own: str, base: str) -> str:
        return ", ".join([*filter(None, own.split(", ")), *(f"baseline {b}" for b in filter(None, base.split(", ")))])

    both = [join(own, b) for own, b in zip(out["flags"].fillna(""), out["base"].fillna(""))]
    return out.drop(columns="base").assign(flags=both)


def _in_order(frame, order: dict[str, int]):
    if frame.empty or "workload" not in frame:
        return frame
    return frame.sort_values("workload", key=lambda w: w.map(order), kind="stable").reset_index(drop=True)


def _controls(sw, doc: dict | None, levels: list[int], notes: list[str]) -> pd.DataFrame:
    """The controls' table (loadgen.report.controls), its oracle read per workload from that
    workload's own what-if (traces-WORKLOAD.jsonl), where a sweep of controls has them."""
    own: dict[str, dict] = {}
    if len(sw.ok) and sw.ok["variant"].isin(controls.kinds(sw.manifest)).any():
        own, said = whatif.per_workload(sw.root, sw.model, levels, sorted(set(sw.ok["workload"])))
        notes += said
    return controls.table(sw.ok, sw.manifest, doc, own)


def _tables(sw: Sweep, per_tok: float | None) -> tuple[dict, pd.DataFrame, str]:
    """Every table of the report, flagged and in the plan's workload order; the per-request
    frame the per-request plots read; where the time breakdown's costs come from."""
    sp = tables.speedup(sw)
    t = {
        "throughput": tables.throughput(sw),
        "speedup": sp,
        "break_even": tables.break_even(sp),
        "best_variant": tables.best(sw),
        "latency": tables.latency(sw),
        "acceptance": tables.acceptance(sw),
        "per_position": tables.per_position(sw),
        "steps": tables.step_distribution(sw),
        "waste": tables.waste(sw, per_tok),
    }
    bd, bd_where = breakdown.table(sw)
    if len(bd):  # a cost profile prices the SD cells' steps
        t["breakdown"] = bd
    plan = sw.manifest.get("plan") or {}
    if plan.get("acceptance_lengths"):  # a sweep with an acceptance axis (docs/sweep.md)
        t["break_even_acceptance"] = tables.break_even_acceptance(
            sp, plan.get("acceptance_templates") or [], plan["acceptance_lengths"]
        )
    per_req, t["per_request"] = tables.per_request(sw)
    gp = goodput.table(sw)
    if not gp.empty:  # a sweep judged per-request objectives: the decision by goodput too
        t["goodput"], t["best_by_goodput"] = gp, goodput.best(gp, sw.baseline)
    over = overtime.table(sw)
    if not over.empty:  # the cells' servers were sampled through their windows
        t["timeline"] = over
    ph = phases.table(sw)
    if not ph.empty:  # the cells reasoned: each phase's speedup (a report without reasoning has none)
        t["phases"], t["phases_break_even"] = ph, phases.break_even(ph, sw.baseline)
    order = {w: i for i, w in enumerate(dict.fromkeys(sw.cells["workload"]))}  # plan order
    cell_flags = _cell_flags(sw)
    t = {k: _in_order(_flagged(v, cell_flags), order) for k, v in t.items()}
    t["speedup"] = _baseline_flags(t["speedup"], cell_flags, sw.baseline)
    per_req = _in_order(per_req, order)
    return t, per_req, bd_where


def _figures(t: dict, per_req, col: dict, out: Path, baseline: str) -> dict:
    """Every plot of the report, drawn from its tables into `out`: name -> PNG path (None where
    there is nothing to draw)."""
    fig = {
        "throughput": plots.lines_vs_load(
            t["throughput"],
            "output_throughput_tok_s",
            "output throughput (tokens/s)",
            "Output throughput against load",
            col,
            out / "throughput.png",
        ),
        "speedup": plots.lines_vs_load(
            t["speedup"],
            "speedup",
            f"speedup over {baseline} (x)",
            "Speedup over the baseline (dashed: break-even load)",
            col,
            out / "speedup.png",
            hline=1.0,
            marks=t["break_even"],
        ),
        "latency": plots.latency(t["latency"], col, out / "latency.png"),
        "frontier": plots.frontier(t["latency"], col, out / "frontier.png"),
        "acceptance": plots.lines_vs_load(
            t["acceptance"],
            "acceptance_rate",
            "accepted / draft tokens",
            "Acceptance rate against load (server counters)",
            col,
            out / "acceptance.png",
        ),
        "acceptance_length": plots.lines_vs_load(
            t["acceptance"],
            "mean_acceptance_length",
            "tokens per step (1 + accepted / drafts)",
            "Mean acceptance length against load",
            col,
            out / "acceptance_length.png",
        ),
        "per_position": plots.per_position(t["per_position"], out / "per_position.png"),
        "steps": plots.step_distribution(t["steps"], col, out / "steps.png"),
        "waste": plots.lines_vs_load(
            t["waste"],
            "rejected_per_generated_token",
            "rejected draft tokens per output token",
            "Waste: verified but rejected draft tokens",
            col,
            out / "waste.png",
        ),
        "per_request": plots.per_request(per_req, col, out / "per_request.png"),
        "per_request_server": plots.per_request_server(per_req, col, out / "per_request_server.png"),
    }
    return fig


@dataclass
class _Report:
    """What every section is made from: the sweep, its tables and figures, the notes, where
    files go; a section may add tables and notes (the controls', the what-if's)."""

    sw: Sweep
    t: dict
    fig: dict
    col: dict
    out: Path
    paths: dict
    notes: list[str]  # the report's notes, a section's included (Built.notes)
    summary_notes: tuple[str, ...]  # those the Summary says (the sweep's own, before any section's)
    profile_name: str | None
    bd_where: str
    levels: list[int]
    doc: dict | None = None  # the sweep's what-if, where it has one
    plotly: bool = False  # the page already loads plotly (the Summary's chart)


# The report's sections, a family: each a function of the report giving its Section (None:
# nothing to say), in the order they appear, registered with @_section. A new section is a
# function here and nothing else.
SECTIONS: list[Callable[[_Report], Section | None]] = []


def _section(f: Callable[[_Report], Section | None]) -> Callable[[_Report], Section | None]:
    SECTIONS.append(f)
    return f


def build(root: str | Path, out: str | Path | None = None) -> Built:
    sw = read(root)
    out = Path(out) if out else sw.root / "report"
    out.mkdir(parents=True, exist_ok=True)
    variants = list((sw.manifest.get("plan") or {}).get("variants") or dict.fromkeys(sw.cells["variant"]))
    col = plots.colours(variants, sw.baseline)
    per_tok, profile_name = _cost_per_token(sw.model)
    t, per_req, bd_where = _tables(sw, per_tok)
    paths = {}
    for name, frame in t.items():
        paths[name] = out / f"{name}.csv"
        store.atomic(paths[name], lambda tmp, f=frame: f.to_csv(tmp, index=False))
        store.atomic(out / f"{name}.parquet", lambda tmp, f=frame: f.to_parquet(tmp, index=False))
    fig = _figures(t, per_req, col, out, sw.baseline)
    notes = _notes(sw)
    closed = sw.cells[sw.cells["mode"] == "closed"] if len(sw.cells) and "mode" in sw.cells else sw.cells.iloc[:0]
    levels = sorted({int(v) for v in closed.get("level", [])})
    report = _Report(sw, t, fig, col, out, paths, notes, tuple(notes), profile_name, bd_where, levels)
    sections = [s for make in SECTIONS if (s := make(report)) is not None]
    _controls_in_summary(report, sections[0])
    dep = sw.manifest.get("deployment") or {}
    title = f"loadgen report: {dep.get('name', sw.root.name)} on {dep.get('engine', '?')}"
    if sw.single:
        title = f"loadgen report: the run in {sw.root.name} ({dep.get('model') or 'its server'})"
    title += f"; sampling: {sampling_of(sw)}"
    md, html_path = out / "report.md", out / "report.html"
    store.atomic(md, lambda tmp: Path(tmp).write_text(markdown(title, sections, out)))
    store.atomic(html_path, lambda tmp: Path(tmp).write_text(page(title, sections)))
    return Built(out, html_path, md, [p for p in fig.values() if p], paths, notes)


def sampling_of(sw: Sweep) -> str:
    """The sampling the cells' requests asked for, in a few words (the report's header): one
    phrase where every cell asked the same, else each workload's."""
    by_workload: dict[str, str] = {}
    for _, row in sw.cells.iterrows():
        s = sw.summaries.get(row["path"]) if "path" in row else None
        if s is not None:
            by_workload.setdefault(str(row["workload"]), sampling_label((s.get("config") or {}).get("sampling")))
    said = set(by_workload.values())
    if len(said) <= 1:
        return next(iter(said), "not recorded")
    return "; ".join(f"{w}: {label}" for w, label in by_workload.items())


def _single_sentence(sw: Sweep) -> str:
    """The lead of a single run's report: what it measured, in one sentence."""
    row = sw.ok.iloc[0] if len(sw.ok) else sw.cells.iloc[0]
    s = sw.summaries[row["path"]]
    load = {"closed": f"{int(row['level'])} users", "trace": f"{row['level']:g}x its trace's rate"}.get(
        row["mode"], f"{row['level']:g} requests/s"
    )
    tput = s.get("output_throughput_tok_s") or 0.0
    ttft, tpot = (s.get("ttft_ms") or {}).get("p50"), (s.get("tpot_ms") or {}).get("p50")
    lat = f"; TTFT p50 {ttft:.1f} ms, TPOT p50 {tpot:.2f} ms" if ttft is not None and tpot is not None else ""
    return (
        f"One run ({row['variant']}) on {row['workload']} at {load}: {s.get('completed', 0)} requests, "
        f"{tput:,.1f} output tokens/s{lat}. A sweep (loadgen sweep) compares variants and loads."
    )


def _measured_count(sw: Sweep) -> str:
    planned = len(sw.planned) or len(sw.cells)
    if not sw.has_repeats:
        return f"{len(sw.ok)} of {planned} cells measured"
    return (
        f"{len(sw.ok)} cells measured, {len(sw.measured)} of {planned} planned measurements (repeats; the "
        "tables give each cell's mean, the per-measurement ones a row per repeat)"
    )


@_section
def _summary(r: _Report) -> Section:
    sw, t = r.sw, r.t
    dep, plan = sw.manifest.get("deployment") or {}, plan_of(sw)
    where = " in virtual time (every cell simulated: sweep --virtual)" if plan.get("virtual") else ""
    intro = (
        f"Deployment {dep.get('name')} ({dep.get('model')}) on {dep.get('engine')}{where}; variants "
        f"{', '.join(plan.get('variants') or [])}; baseline {sw.baseline}; {_measured_count(sw)}. Definitions: "
        "docs/report.md and docs/metrics.md."
    )
    if sw.single:
        intro = f"A single run's results ({sw.root}), read as a sweep of one cell (docs/report.md)."
    acceptance_axis = [
        (
            "How good the drafter must be: break-even acceptance length per load level (synthetic "
            "acceptance, 1 + accepted drafts per verify step)",
            t[key],
            "break_even_acceptance.csv",
        )
        for key in ("break_even_acceptance",)
        if key in t
    ]
    summary = Section(
        "Summary",
        intro,
        [
            ("Best variant per load level", t["best_variant"], "best_variant.csv"),
            ("Where speculative decoding stops paying", t["break_even"], "break_even.csv"),
            *acceptance_axis,
        ],
        _figs(r, "speedup"),
        after="\n".join(r.summary_notes),
    )
    summary.lead = decision.sentences(
        t["best_variant"], t["speedup"], t["break_even"], sw.ok, sw.baseline, virtual=bool(plan.get("virtual"))
    )
    if "goodput" in t:
        summary.lead += goodput.sentences(t["best_by_goodput"], plan.get("goodput"))
        summary.tables.append(("Best variant by goodput per load level", t["best_by_goodput"], "best_by_goodput.csv"))
    if "phases" in t:
        summary.lead += phases.sentences(t["phases"], t["phases_break_even"], sw.baseline)
    summary.chart = interactive.speedup_chart(t["speedup"], r.col, sw.baseline)
    if sw.single:  # one run: no variants to weigh against each other
        summary.lead, summary.chart = [_single_sentence(sw)], ""
    summary.lead = [
        f"Priced on a profile of another machine (--profile-anyway): {m}; its figures describe that machine."
        for m in plan.get("profile_mismatch") or []
    ] + summary.lead
    r.plotly = bool(summary.chart)
    return summary


def plan_of(sw: Sweep) -> dict:
    return sw.manifest.get("plan") or {}


def _figs(r: _Report, *names: str) -> list:
    return [r.fig[n] for n in names if r.fig.get(n)]


@_section
def _throughput(r: _Report) -> Section:
    return Section(
        "Throughput and speedup",
        "Speedup: a variant's output tokens/s over the baseline's at the same workload and load level.",
        [("Speedup over the baseline", r.t["speedup"], "speedup.csv")],
        _figs(r, "throughput"),
    )


@_section
def _latency(r: _Report) -> Section:
    return Section(
        "Latency",
        "TTFT and TPOT percentiles over measured requests; the frontier shows what each "
        "variant trades between throughput and per-token latency.",
        [("Latency", r.t["latency"], "latency.csv")],
        _figs(r, "latency", "frontier"),
    )


@_section
def _acceptance(r: _Report) -> Section:
    return Section(
        "Acceptance",
        "Server side: the server's counters over each cell's window. Client side: "
        "tokens per decode step from the chunk (or burst) trace; client_over_server compares the "
        "accepted tokens both saw.",
        [("Acceptance, server and client", r.t["acceptance"], "acceptance.csv")],
        _figs(r, "acceptance", "acceptance_length", "per_position", "steps"),
    )


@_section
def _waste(r: _Report) -> Section:
    text = "Rejected draft tokens are verified by the target model and thrown away. " + (
        f"The share of the window spent verifying them is estimated with the {r.profile_name} cost "
        "profile's per-token forward cost (an estimate, exact only for the emulator)."
        if r.profile_name
        else "No cost profile is known for this model, so the time share is not estimated."
    )
    return Section("Waste", text, [("Rejected draft tokens", r.t["waste"], "waste.csv")], _figs(r, "waste"))


@_section
def _breakdown(r: _Report) -> Section | None:
    if "breakdown" not in r.t:  # no cost profile prices the SD cells' steps
        return None
    return Section(
        "Time breakdown",
        "Where an SD cell's step time goes, as the study splits it (its section 3.2): drafting, verifying "
        "the accepted tokens (every running request's token and its accepted drafts), verifying the "
        "rejected drafts (what the forward costs with them over without), and the rest (prefill, what SD "
        f"mode adds to every step). The steps are the cell's own, read off its chunk times; their costs come "
        f"from {r.bd_where}; modelled_over_measured: the profile's time for those steps over the measured "
        '(docs/metrics.md, "Time breakdown").',
        [("Share of step time per SD cell", r.t["breakdown"], "breakdown.csv")],
        [],
    )


@_section
def _reasoning(r: _Report) -> Section | None:
    if "phases" not in r.t:
        return None
    return Section(
        "Reasoning: thinking and answering",
        "Where the model thinks before it answers (a reasoning parser; docs/metrics.md): each "
        "phase's TPOT and tokens per decode chunk, TTFO (time to the first answer token), and "
        "each phase's speedup: the baseline's TPOT in that phase over the variant's at the same "
        "load (docs/report.md).",
        [
            ("Thinking and answering per cell", r.t["phases"], "phases.csv"),
            ("Where SD stops paying, per phase", r.t["phases_break_even"], "phases_break_even.csv"),
        ],
        [],
    )


@_section
def _per_request(r: _Report) -> Section:
    return Section(
        "Per-request variability",
        "Each request's own acceptance (mean tokens per decode step) and its "
        "rank correlation with TPOT: strongly negative means the slow requests are the ones whose "
        "drafts were rejected. Where the server reports each request's speculative decoding (vLLM's "
        "--per-request-spec-decode-metrics), its acceptance length per request too (server_al_*): the "
        "mean of requests counts each request once, where the server's counters weigh long answers "
        "more.",
        [("Per cell", r.t["per_request"], "per_request.csv")],
        _figs(r, "per_request", "per_request_server"),
    )


@_section
def _over_time(r: _Report) -> Section | None:
    if "timeline" not in r.t:
        return None
    section = Section(
        "Over time",
        'Each cell\'s server window sampled through the run (docs/metrics.md, "Over time"): running and '
        "waiting requests beside the client's own count in flight, generation tokens/s and acceptance per "
        "interval (the intervals' counts add up to the window's); pick a cell in the chart's menu. Below, "
        "every interval of every cell: acceptance and throughput against the running batch.",
        [("Per cell and interval", r.t["timeline"], "timeline.csv")],
        [],
    )
    section.chart = overtime.timeline_chart(r.t["timeline"], include_js=not r.plotly) + overtime.batch_scatter(
        r.t["timeline"], r.col
    )
    return section


@_section
def _whatif(r: _Report) -> Section | None:
    """The sweep's what-if, where it has one (its notes join the report's either way)."""
    r.doc, what_notes = whatif.load(r.sw.root, r.sw.model, r.levels)
    r.notes += what_notes
    if r.doc is None:
        return None
    section, wide, r.fig["whatif"] = whatif.section(r.doc, r.out, page_has_plotly=r.plotly)
    r.paths["whatif"] = r.out / "whatif.csv"
    store.atomic(r.paths["whatif"], lambda tmp: wide.to_csv(tmp, index=False))
    store.atomic(r.out / "whatif.parquet", lambda tmp: wide.to_parquet(tmp, index=False))
    return section


def _controls_in_summary(r: _Report, summary: Section) -> None:
    """vLLM's SD controls against fixed k and the oracle (its oracle from the what-if), in the
    Summary where the sweep ran controls."""
    ctl = _controls(r.sw, r.doc, r.levels, r.notes)
    if len(ctl) and not r.sw.single:
        summary.lead += controls.sentences(ctl)
        summary.tables.append(("SD controls against the best fixed k and the oracle", ctl, "controls.csv"))
        r.paths["controls"] = r.out / "controls.csv"
        store.atomic(r.paths["controls"], lambda tmp: ctl.to_csv(tmp, index=False))
