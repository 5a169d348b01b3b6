"""From a sweep's cell table to its answer: each variant's speedup over the baseline, per
workload and load level."""

from __future__ import annotations

import pandas as pd


def _repeated(table: pd.DataFrame) -> bool:
    """A table of measurements (cells.parquet) from a sweep with repeats."""
    return "repeat" in table and bool((table["repeat"].fillna(1) > 1).any())


def speedup(table: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """One row per (workload, level, variant) with both measured: output throughput (tok/s)
    of the variant over the baseline's at the same workload and level (docs/metrics.md); with
    repeats, of each cell's mean throughput over them."""
    cols = ["workload", "mode", "level", "variant", "output_throughput_tok_s", "baseline_tok_s", "speedup"]
    if table.empty or "status" not in table:
        return pd.DataFrame(columns=cols)
    if _repeated(table):
        from loadgen.results.reading import combine

        table = combine(table[table["status"] == "ok"])  # each cell's mean throughput over its repeats
    ok = table[(table["status"] == "ok") & (table["output_throughput_tok_s"] > 0)]
    base = ok[ok["variant"] == baseline].set_index(["workload", "mode", "level"])["output_throughput_tok_s"]
    rows = ok[ok["variant"] != baseline].join(
        base.rename("baseline_tok_s"), on=["workload", "mode", "level"], how="inner"
    )
    rows = rows.assign(speedup=rows["output_throughput_tok_s"] / rows["baseline_tok_s"])
    return rows[cols].reset_index(drop=True)


def spread(measured: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """With repeats (sweep --repeats): per (workload, level, variant) the speedup of each round,
    the variant's repeat r over the baseline's repeat r (the same round, so both saw the same
    stretch of the machine's time), as its lowest and highest and how many rounds had both."""
    cols = ["workload", "mode", "level", "variant", "rounds", "speedup_min", "speedup_max"]
    if measured.empty or "repeat" not in measured:
        return pd.DataFrame(columns=cols)
    ok = measured[(measured["status"] == "ok") & (measured["output_throughput_tok_s"] > 0)]
    keys = ["workload", "mode", "level", "repeat"]
    base = ok[ok["variant"] == baseline].set_index(keys)["output_throughput_tok_s"].rename("base")
    per = ok[ok["variant"] != baseline].join(base, on=keys, how="inner")
    if per.empty:  # no variant beside the baseline (a sweep of one model served alone): no speedups
        return pd.DataFrame(columns=cols)
    per = per.assign(s=per["output_throughput_tok_s"] / per["base"])
    out = per.groupby(["workload", "mode", "level", "variant"], sort=False)["s"].agg(["count", "min", "max"])
    return out.reset_index().rename(columns={"count": "rounds", "min": "speedup_min", "max": "speedup_max"})[cols]


def render(table: pd.DataFrame, baseline: str = "baseline") -> str:
    """Per workload: levels down, variants across, speedup over the baseline (its tok/s in the
    first column); '-' where a cell is missing or failed. With repeats: of the mean throughputs,
    each followed by the lowest and highest round's speedup."""
    if table.empty:
        return "No cells finished."
    failed = table[table["status"] != "ok"]
    rounds = pd.DataFrame()
    if _repeated(table):
        from loadgen.results.reading import combine

        rounds = spread(table, baseline).set_index(["workload", "level", "variant"])
        table = combine(table[table["status"] == "ok"])
    s = speedup(table, baseline)
    variants = [v for v in dict.fromkeys(table["variant"]) if v != baseline]
    blocks = []

    def flagged(col: str) -> set:
        return set(table.loc[table[col].fillna(False).astype(bool), "path"]) if col in table else set()

    client, behind, short = flagged("client_bound"), flagged("server_behind"), flagged("short_of_users")
    bound = client | behind | short
    for workload in dict.fromkeys(table["workload"]):
        t = table[table["workload"] == workload]
        mode = t["mode"].iloc[0]
        head = {"closed": "concurrency", "trace": "trace speed (x)"}.get(mode, "rate (req/s)")
        width = max([12 if rounds.empty else 24, *(len(v) + 2 for v in variants)])
        base_w = max(16, len(baseline) + 7)
        lines = [
            f"Speedup over {baseline} (output tok/s ratio), workload {workload}:",
            f"{head:>12} {baseline + ' tok/s':>{base_w}}" + "".join(f"{v:>{width}}" for v in variants),
        ]
        for level in sorted(t["level"].unique()):
            b = t[(t["variant"] == baseline) & (t["level"] == level) & (t["status"] == "ok")]
            row = f"{level:>12g} " + (
                f"{b['output_throughput_tok_s'].iloc[0]:>{base_w}.1f}" if len(b) else f"{'-':>{base_w}}"
            )
            for v in variants:
                hit = s[(s["workload"] == workload) & (s["level"] == level) & (s["variant"] == v)]
                cells = t[(t["level"] == level) & t["variant"].isin([v, baseline])]["path"]
                mark = "!" if bound & set(cells) else "x"
                text = f"{hit['speedup'].iloc[0]:.2f}{mark}" if len(hit) else "-"
                if len(hit) and (workload, level, v) in rounds.index:
                    r = rounds.loc[(workload, level, v)]
                    text += f" ({r['speedup_min']:.2f}-{r['speedup_max']:.2f})"
                row += f"{text:>{width}}"
            lines.append(row)
        blocks.append("\n".join(lines))
    if bound:
        why = []
        if client:
            why.append(f"the client was the bottleneck in {len(client)} cell(s) (client_bound: give it more cores)")
        if behind:
            why.append(
                f"the emulator fell behind real time in {len(behind)} cell(s) (server_behind: run it slower, "
                "--time-scale)"
            )
        if short:
            why.append(
                f"fewer requests were ever in flight than the users in {len(short)} cell(s) (short_of_users: send "
                "more requests, --num-requests)"
            )
        blocks.append("!: " + "; ".join(why) + ". Those figures understate the server at that load.")
    if not rounds.empty:
        blocks.append("With repeats: the speedup of the mean throughputs, (lowest-highest) of the rounds.")
    if len(failed):
        blocks.append(f"{len(failed)} cell(s) failed: " + ", ".join(failed["path"]))
    return "\n\n".join(blocks)
