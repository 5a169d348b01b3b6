"""The report's first lines: per workload, which variant to deploy at which load, its speedup
there, where speculative decoding stops paying, and how sure the figures are, in plain
sentences generated from the tables (best_variant, speedup, break_even) and the cells' flags.
Nothing here is measured anew; tests check each sentence against the tables."""

from __future__ import annotations

import pandas as pd

from loadgen.report.numbers import short
from loadgen.report.tables import EVEN

FLAGS = ("client_bound", "server_behind", "short_of_users")


def flags(ok: pd.DataFrame) -> pd.Series:
    """Per cell (row of the sweep's ok cells): its flags as text, '' for none."""
    cols = [c for c in FLAGS if c in ok]
    return (
        ok[cols].fillna(False).astype(bool).apply(lambda r: ", ".join(c for c in cols if r[c]), axis=1)
        if cols and len(ok)
        else pd.Series([""] * len(ok), index=ok.index, dtype=object)
    )


def _unit(mode: str) -> str:
    return {"closed": "users", "trace": "times the trace's rate"}.get(mode, "requests/s")


def _x(s) -> str:
    return f"{s:.2f}x"


def sentences(
    best: pd.DataFrame,
    sp: pd.DataFrame,
    break_even: pd.DataFrame,
    ok: pd.DataFrame,
    baseline: str,
    virtual: bool = False,
) -> list[str]:
    """One sentence per workload (and load mode), then one on how sure (`virtual`: every cell was
    simulated, `loadgen sweep --virtual`, so nothing was measured in real time)."""
    out = []
    flagged = flags(ok)
    for (workload, mode), g in best.groupby(["workload", "mode"], sort=False):
        g = g.sort_values("level")
        unit = _unit(mode)
        # consecutive levels with the same winner (a winner within EVEN of the baseline: no SD)
        runs: list[list] = []
        for _, r in g.iterrows():
            win = (
                r["best_variant"]
                if r["speedup"] is not None and not pd.isna(r["speedup"]) and r["speedup"] > 1 + EVEN
                else baseline
            )
            if runs and runs[-1][0] == win:
                runs[-1][1].append(r)
            else:
                runs.append([win, [r]])
        parts = []
        for win, rows in runs:
            lo, hi = rows[0]["level"], rows[-1]["level"]
            where = f"at {short(lo)} {unit}" if lo == hi else f"from {short(lo)} to {short(hi)} {unit}"
            if win == baseline:
                parts.append(
                    f"{where}, no speculative decoding ({baseline}): no variant is more than {EVEN:.0%} faster"
                )
            else:
                s0, s1 = rows[0]["speedup"], rows[-1]["speedup"]
                gain = _x(s0) if lo == hi else f"{_x(s0)} at {short(lo)}, {_x(s1)} at {short(hi)}"
                parts.append(f"{where}, {win} ({gain})")
        stops = _stops(
            break_even[(break_even["workload"] == workload) & (break_even["mode"] == mode)], unit, g["level"].max()
        )
        out.append(f"On {workload}: " + "; ".join(parts) + f". {stops}")
    n_flag = int((flagged != "").sum())
    sure = (
        f"How sure: {n_flag} of {len(ok)} cells flagged ({_flag_counts(flagged)}; marked in the tables and "
        "on the chart's points): their throughput understates the server."
        if n_flag
        else f"How sure: none of the {len(ok)} cells is flagged."
    )
    reps = ok["repeats"].max() if "repeats" in ok and ok["repeats"].notna().any() else 1
    if virtual:
        return out + [
            "How sure: every cell was simulated in virtual time (sweep --virtual): the emulator's cost "
            "model without a client, a machine or run-to-run variation in the way; it predicts, it "
            "measures nothing."
        ]
    sure += (
        " Each cell was measured once: run-to-run variation is not covered (a second sweep on the same "
        "machine can differ by a few percent)."
        if reps <= 1
        else _spread(sp, int(reps))
    )
    return out + [sure]


def _spread(sp: pd.DataFrame, reps: int) -> str:
    """How far the rounds' speedups lie apart (speedup.spread), and where that leaves a
    choice unsure."""
    text = f" Each cell was measured up to {reps} times, in rounds on freshly started servers"
    if "speedup_min" not in sp or sp["speedup_min"].isna().all():
        return text + "."
    width = (sp["speedup_max"] - sp["speedup_min"]) / sp["speedup"]
    widest = sp.loc[width.idxmax()]
    text += (
        f": a speedup's rounds lie {width.median():.1%} of it apart at the median, {width.max():.1%} at most "
        f"({widest['variant']} on {widest['workload']} at {short(widest['level'])})"
    )
    straddle = sp[(sp["speedup_min"] < 1 - EVEN) & (sp["speedup_max"] > 1 + EVEN)]
    if len(straddle):
        text += (
            f"; in {len(straddle)} of {len(sp)} cells one round says SD pays and another that it costs "
            "(speedup table: speedup_min, speedup_max)"
        )
    return text + "."


def _stops(be: pd.DataFrame, unit: str, top_level) -> str:
    """Where SD stops paying, from the break-even table of the workload's SD variants: one
    sentence when every variant's verdict is of one kind (all pay at every load measured, or
    none pays at any), else each variant's own (one may stop at 4 users while another still
    pays at the highest load: saying only where the last one stops would contradict it)."""
    if be.empty:
        return ""
    kinds = {_kind(r) for _, r in be.iterrows()}
    if kinds == {"pays"}:
        return f"Speculative decoding pays (or is even) at every load measured (up to {short(top_level)} {unit})."
    if kinds == {"never"}:
        return "No speculative-decoding variant pays at any load measured."
    parts = []
    for _, r in be.sort_values("break_even_level", na_position="last").iterrows():
        kind, v = _kind(r), r["variant"]
        if kind == "stops":
            parts.append(f"{v} at about {short(round(r['break_even_level'], 1))} {unit}")
        elif kind == "pays":
            parts.append(f"{v} does not within the loads measured (it pays or is even up to {short(top_level)} {unit})")
        elif kind == "never":
            parts.append(f"{v} never pays")
        else:
            parts.append(f"{v}: {r['verdict']}")
    return "Where speculative decoding stops paying: " + "; ".join(parts) + "."


def _kind(row) -> str:
    """A break-even row's verdict as one of stops, pays, never, other (tables.break_even)."""
    if row["break_even_level"] is not None and not pd.isna(row["break_even_level"]):
        return "stops"
    verdict = str(row["verdict"])
    return "pays" if verdict.startswith("pays") else "never" if verdict.startswith("never") else "other"


def _flag_counts(flagged: pd.Series) -> str:
    counts: dict[str, int] = {}
    for f in flagged:
        for name in filter(None, f.split(", ")):
            counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} {name}" for name, n in counts.items())
