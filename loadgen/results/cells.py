"""Where a sweep's results live, written so that none is ever half there:

    DIR/manifest.json                      the plan, versions, command line, servers, host
    DIR/cells/VARIANT/WORKLOAD/LEVEL/      one directory per finished cell:
        summary.json, requests.parquet       the run's summary (plus `cell`) and its requests
    DIR/cells/VARIANT/WORKLOAD/LEVEL.rN/   with --repeats: the cell's measurement N (N >= 2)
    DIR/cells.parquet                      one row per finished cell, rebuilt after each cell
    DIR/servers/VARIANT.log                each server's output

A cell is written into a temporary directory and renamed into place: it is there completely or
not at all, so a sweep killed at any moment loses at most the cell it was running.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd

from loadgen.measures.rows import Rows
from loadgen.planning.plan import Cell
from loadgen.results import store

MANIFEST = "manifest.json"
CELLS = "cells"
TABLE = "cells.parquet"
DONE = ("ok", "failed")  # statuses --resume keeps (failed too, unless --retry-failed)


def cell_dir(root: Path, cell: Cell) -> Path:
    return root / CELLS / cell.key


def progress_dir(root: Path, cell: Cell) -> Path:
    """Where a cell runs: its journal (loadgen.outputs.journal) and, when it ends, its
    requests.parquet; renamed to `cell_dir` once its summary is written there. A sweep killed
    during the cell leaves it, and `--resume` continues the cell from it."""
    final = cell_dir(root, cell)
    return final.parent / f".run-{final.name}"


def write_cell(root: Path, cell: Cell, rows: Rows | pd.DataFrame, summary: dict) -> Path:
    """The cell into its place: its requests (a frame, written here; or rows already written
    to requests.parquet in its directory in progress) and its summary."""
    final = cell_dir(root, cell)
    final.parent.mkdir(parents=True, exist_ok=True)
    progress = progress_dir(root, cell)
    if isinstance(rows, Rows) and rows.path is not None and rows.path.parent == progress:
        tmp = progress
    else:
        tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        frame = rows if not isinstance(rows, Rows) else rows.frame if rows.frame is not None else None
        if frame is None:  # rows on disk elsewhere
            assert isinstance(rows, Rows) and rows.path is not None
            shutil.copyfile(rows.path, tmp / store.REQUESTS)
        else:
            store.write_requests(tmp, frame)
        shutil.rmtree(progress, ignore_errors=True)  # an attempt that measured nothing
    store.write_summary(tmp, summary)
    if final.exists():  # a cell run again (--retry-failed, or after an interruption)
        old = final.parent / f".old-{final.name}-{os.getpid()}"
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    return final


def clean_partial(root: Path) -> None:
    """Remove what a killed sweep left half-written."""
    base = root / CELLS
    if base.is_dir():
        for path in base.glob("*/*/.*"):
            if path.name.startswith((".tmp-", ".old-")):
                shutil.rmtree(path, ignore_errors=True)


def finished(root: Path) -> dict[str, dict]:
    """Cell key -> the `cell` part of its summary, for every cell on disk."""
    out = {}
    base = root / CELLS
    for path in sorted(base.glob("*/*/*/" + store.SUMMARY)) if base.is_dir() else []:
        try:
            with open(path) as f:
                cell = json.load(f)["cell"]
        except (OSError, ValueError, KeyError):
            continue  # unreadable: the cell is run again
        out[cell["key"]] = cell
    return out


def row(summary: dict) -> dict:
    """One cells.parquet row from a cell's summary."""
    c, sd, srv = summary["cell"], summary.get("spec_decode") or {}, summary.get("server") or {}

    def pct(key: str, p: str):
        return (summary.get(key) or {}).get(p)

    return {
        "variant": c["variant"],
        "workload": c["workload"],
        "workload_spec": c["workload_spec"],
        "mode": c["mode"],
        "level": c["level"],
        "repeat": c.get("repeat", 1),
        "cell": Cell(c["variant"], c["workload"], c["level"], c["mode"]).base_key,
        "status": c["status"],
        "error": c.get("error"),
        "completed": summary.get("completed"),
        "failed": summary.get("failed"),
        "duration_s": summary.get("duration_s"),
        "output_throughput_tok_s": summary.get("output_throughput_tok_s"),
        "total_throughput_tok_s": summary.get("total_throughput_tok_s"),
        "request_throughput_req_s": summary.get("request_throughput_req_s"),
        **{
            f"{m}_{p}_ms": pct(f"{m}_ms", p)
            for m in ("ttft", "tpot", "itl", "e2e")
            for p in ("mean", "p50", "p90", "p99")
        },
        "tokens_per_chunk_mean": summary.get("tokens_per_chunk_mean"),
        "acceptance_rate": sd.get("acceptance_rate"),
        "mean_acceptance_length": sd.get("mean_acceptance_length"),
        "drafts": sd.get("drafts"),
        "draft_tokens": sd.get("draft_tokens"),
        "accepted_tokens": sd.get("accepted_tokens"),
        "server_generation_tok_s": srv.get("generation_tok_s"),
        "kv_usage_mean": (srv.get("kv_usage") or {}).get("mean"),
        "running_mean": (srv.get("running") or {}).get("mean"),
        "waiting_mean": (srv.get("waiting") or {}).get("mean"),
        "server_restarted": srv.get("restarted"),
        "client_bound": summary.get("client_bound"),
        "in_flight_max": (summary.get("sending") or {}).get("in_flight_max"),
        "short_of_users": (summary.get("sending") or {}).get("short"),
        "server_behind": (srv.get("emulator") or {}).get("behind"),
        "time_scale": summary.get("time_scale") or 1.0,
        # with per-request objectives (sweep --goodput): the share of judged requests that met
        # them all, and good requests a second of the window
        "goodput_fraction": (summary.get("goodput") or {}).get("fraction"),
        "goodput_req_s": (summary.get("goodput") or {}).get("req_s"),
        "path": c["key"],
    }


def rebuild_table(root: Path, order: list[str]) -> pd.DataFrame:
    """cells.parquet from every finished cell's summary, in plan order."""
    rows = []
    base = root / CELLS
    for path in base.glob("*/*/*/" + store.SUMMARY) if base.is_dir() else []:
        try:
            with open(path) as f:
                rows.append(row(json.load(f)))
        except (OSError, ValueError, KeyError):
            continue
    rank = {key: i for i, key in enumerate(order)}
    rows.sort(key=lambda r: rank.get(r["path"], len(rank)))
    frame = pd.DataFrame(rows)
    store.atomic(root / TABLE, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))
    return frame
