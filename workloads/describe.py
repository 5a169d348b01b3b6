"""Workloads in words: the catalog as a table (`loadgen workloads list`), and what one
workload spec reads as (`loadgen workloads show`)."""

from __future__ import annotations

from workloads import catalog
from workloads.errors import WorkloadError
from workloads.length_summary import summary
from workloads.workload import open_workload


def _fmt(d: dict | None) -> str:
    return "-" if d is None else f"{d['mean']:.0f} / {d['p50']:.0f} / {d['p99']:.0f}"


def catalog_lines(data_dir: str | None, tokenizer=None) -> list[str]:
    """Each catalog workload's source here, record count and lengths (no network)."""
    unit = "tokens" if tokenizer else "words"
    lines = [f"{'name':<16}{'records':>8}  {'prompt ' + unit + ' mean/p50/p99':<30}{'output':<12}source"]
    for e in catalog.entries().values():
        usable = [s for s, why in catalog.candidates(e, catalog.data_dir(data_dir)) if why is None]
        local = [s for s in usable if not s.startswith("hf:")]
        spec = local[0] if local else e.standin
        try:
            w = open_workload(spec)
        except WorkloadError as err:
            lines.append(f"{e.name:<16}{'?':>8}  {'':<30}{e.output or '':<12}{spec}: {err}")
            continue
        reqs = w.records[: e.sample] if w.records is not None else list(w.requests(e.sample, 0))
        s = summary(reqs, tokenizer)
        where = (
            spec if local else (f"{usable[0]} (hub, not loaded here)" if usable else f"{e.standin} (offline stand-in)")
        )
        lines.append(f"{e.name:<16}{s['requests']:>8}  {_fmt(s['prompt']):<30}{e.output or 'data':<12}{where}")
    return lines


def workload_lines(w, num: int, tokenizer=None) -> list[str]:
    """What an opened workload reads as: source, records, categories, lengths, examples (none
    from a data set whose text must not be shown)."""
    reqs = w.records if w.records is not None else list(w.requests(num, 0))
    s = summary(reqs, tokenizer)
    lines = [
        f"workload   {w.spec}",
        f"source     {w.source}" + (f"\nnote       {w.notice}" if w.notice else ""),
        f"records    {len(w.records)}" if w.records is not None else f"generator  (described over {num} requests)",
    ]
    if w.skipped:
        lines.append(f"skipped    {w.skipped} bad records; first: {w.bad[0]}")
    for what, n in w.repairs.items():
        lines.append(f"repaired   {n} records read with {what} (optional)")
    cats = w.categories()
    if w.records is not None and len(cats) > 1:
        lines.append("categories " + ", ".join(f"{k or '(none)'} {v}" for k, v in sorted(cats.items())))
    lines.append(f"lengths in {s['unit']}: mean / p50 / p99 / max")
    for key in ("prompt", "reference", "max_tokens"):
        d = s[key]
        if d is not None:
            lines.append(f"  {key:<10} {d['mean']:.0f} / {d['p50']:.0f} / {d['p99']:.0f} / {d['max']}")
    lines.append(
        f"output     {w.policy.mode}"
        + (f":{w.policy.tokens}" if w.policy.tokens else "")
        + "  (data: as the data set's loader sets it)" * (w.policy.mode == "data")
    )
    if w.sensitive:
        lines.append("examples   withheld: this data set's text must not be shown or stored")
        return lines
    for r in reqs[:2]:
        text = " ".join(r.text().split())
        lines.append(f"example    {r.id}: {text[:160]}{'...' if len(text) > 160 else ''}")
    return lines
