"""A run's figures from its journal (`loadgen summarize DIR`): the requests each process
appended as they ended (loadgen.outputs.journal) and the configuration written before the load
went, read back into the same request frame and summary a finished run writes. For a run that
ended normally the figures are the same; for one killed outright they cover every request
journaled before the kill, and the summary says the run was cut and where (`journal`). What a
killed run cannot have: the server's metric window (scraped around the whole run) and the
exact token counts of a `--tokenizer` run's requests whose text was not journaled."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen import config as configs
from loadgen.errors import LoadgenError
from loadgen.load import timescale
from loadgen.load.execute import RunResult
from loadgen.measures.rows import Rows
from loadgen.measures.summary import summarize
from loadgen.outputs import journal
from loadgen.results import requests, store

_NS = 1e9


def summarize_dir(directory: str | Path) -> tuple[Rows, dict]:
    """The request rows (requests.parquet, written here from the journal) and summary of the
    run whose journal is in `directory`."""
    path = Path(directory)
    if not path.is_dir():
        raise LoadgenError(f"{path}: no such directory; give a results directory of loadgen run")
    try:
        j = journal.meta(path)
    except journal.OldJournal as e:
        raise LoadgenError(str(e)) from None
    if not j.files or not j.starts:
        raise LoadgenError(
            f"{path}: no journal (records-*.arrows) to summarize; loadgen run writes one "
            "into its --output directory as it goes"
        )
    try:
        saved = json.loads((path / journal.CONFIG).read_text())
        config = dict(saved["config"])
        config["load"]["mode"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise LoadgenError(
            f"{path / journal.CONFIG} is missing or unreadable ({type(e).__name__}: {e}); the run's "
            "configuration, written before its load, is needed beside its journal"
        ) from None
    judged = saved.get("summarize") or {}
    first = j.starts[min(j.starts)]
    t0_ns, t0_unix, scale = int(first["t0_ns"]), first.get("t0_unix"), float(first.get("time_scale") or 1.0)
    j = requests.write_from_journal(path)
    interrupted = j.cut
    result = RunResult(
        [],
        j.lag_at_ns,
        j.lag_ns,
        t0_ns,
        t0_unix,
        interrupted=interrupted,
        loop_lag_worker=j.lag_worker if j.workers > 1 else [],
        load_info=journal.load_of({k: e for k, e in j.ended.items() if k in j.last}),  # how the client measured
    )
    timescale.to_emulated(result, scale)
    rows = Rows(path=path / store.REQUESTS)
    config["clock"] = configs.clock(t0_ns, t0_unix)
    config.setdefault("time_scale", scale)
    summary = summarize(
        rows,
        result.loop_lag(),
        config=config,
        interrupted=interrupted,
        goodput=judged.get("objectives"),
        lateness_threshold_ms=judged.get("lateness_threshold_ms", 5.0),
        timing_threshold_ms=judged.get("timing_threshold_ms", 4.0),
        steady=bool(judged.get("steady_state")),
        load_info=result.load_info,
    )
    ends = rows.array("t_end_ns")
    ends = ends[ends > 0]
    summary["journal"] = {
        "cut": j.cut,
        "files": j.files,
        "records": j.rows,
        "unreadable_batches": j.unreadable,
        "processes_cut": j.cut_files,
        "last_request_end_s": (int(ends.max()) - t0_ns) / _NS if len(ends) else None,
        "note": (
            "the run was cut (a journal has no end): the figures cover the requests journaled before, "
            "up to last_request_end_s; the server's metric window is not known"
            if j.cut_files
            else "the run was stopped before its end"
            if j.cut
            else "summarized from the journal of a run that ended"
        ),
    }
    try:  # a sweep cell's (or a continued cell's) own record of itself is kept
        before = json.loads((path / store.SUMMARY).read_text())
        summary.update({k: before[k] for k in ("cell", "resumed") if k in before})
    except (OSError, ValueError, TypeError):
        pass
    return rows, summary
