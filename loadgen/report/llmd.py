"""A run's or a sweep's results as llm-d-benchmark's Benchmark Report (v0.2.1), the schema the
llm-d harnesses convert their own tools' output to (PyPI: llmd-benchmark-report, its
`br_v0_2_json_schema.json`), so that their users can load loadgen's results beside the rest.

One report per measured cell (a run is a sweep of one cell: loadgen.results.reading). What goes
where (docs/report.md, "Export"): `run` (a uid per cell, the sweep's as `eid`, start, end and
duration, keywords), `scenario.stack` (the server: vLLM, the emulator or llama.cpp, its model,
tensor parallelism, its command line and speculative config as native args), `scenario.load`
(loadgen's load: concurrency or rate, the workload's lengths), and
`results.request_performance.aggregate` (request counts, input and output lengths, TTFT, TPOT,
ITL, E2E, normalized TPOT, and the window's throughputs). The schema has no place for
speculative decoding's acceptance: it goes in the stack's native config, under `loadgen`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from loadgen.measures.describe import describe
from loadgen.results.reading import Sweep
from servers import engines

VERSION = "0.2.1"
_STATS = {"mean": "mean", "stddev": "std", "min": "min", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
_STATS.update(p99p9="p99.9", max="max")


def statistics(d: dict | None, units: str, scale: float = 1.0) -> dict | None:
    """A loadgen distribution (docs/metrics.md, Statistics) as the report's Statistics, or None
    when it is empty."""
    if not d or not d.get("count"):
        return None
    out: dict = {"units": units}
    for theirs, ours in _STATS.items():
        v = d.get(ours)
        if v is not None:
            out[theirs] = float(v) * scale
    return out


def _rate(value: float | None, units: str) -> dict | None:
    return None if value is None else {"units": units, "mean": float(value)}


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=16).hexdigest()


def _seq_len(values: np.ndarray) -> dict:
    values = values[~np.isnan(values)]
    if not len(values):
        return {"distribution": "other", "value": 0}
    same = bool(values.min() == values.max())
    out: dict = {"distribution": "fixed" if same else "other", "value": float(values.mean())}
    if not same:
        out.update(std_dev=float(values.std()), min=int(values.min()), max=int(values.max()))
    return out


def engine_emulates(name: str | None) -> bool:
    return bool(name) and name in engines.REGISTRY and engines.emulates(str(name))


def _engine(sw: Sweep, variant: str, summary: dict) -> dict:
    """The server as the stack's one component."""
    cfg = summary.get("config") or {}
    dep = sw.manifest.get("deployment") or {}
    server = (sw.manifest.get("servers") or {}).get(variant) or {}
    # a run against --base-url does not know its engine: said so, not guessed
    emulated = cfg.get("simulated") or cfg.get("embedded_server") or engine_emulates(dep.get("engine"))
    engine = dep.get("engine") or (engines.emulator() if emulated else "")
    tool = engines.get(engine).tool if engine in engines.REGISTRY else engine or "OpenAI-compatible server"
    model = cfg.get("model") or dep.get("model") or "unknown"
    tp = int(dep.get("tensor_parallel_size") or 1)
    accelerator = cfg.get("profile") or ("emulated" if emulated else "unknown")
    native_args: dict = {"command": server.get("command") or cfg.get("base_url")}
    spec = cfg.get("speculative_config") or server.get("speculative_config")
    return {
        "metadata": {
            "schema_version": "0.0.1",
            "label": f"{variant}-server",
            "cfg_id": _uid(str(native_args.get("command")), json.dumps(spec, sort_keys=True, default=str)),
            "description": dep.get("description") or f"the server at {cfg.get('base_url')}",
        },
        "standardized": {
            "kind": "inference_engine",
            "tool": tool,
            "tool_version": str(server.get("version") or (cfg.get("loadgen_version") if emulated else "")),
            "role": "replica",
            "replicas": 1,
            "model": {"name": model},
            "accelerator": {"model": str(accelerator), "count": tp, "parallelism": {"tp": tp}},
        },
        "native": {
            "args": native_args,
            "config": {
                "loadgen": {
                    "variant": variant,
                    "speculative_config": spec,
                    "spec_decode": summary.get("spec_decode"),
                    "phases": summary.get("phases"),
                }
            },
        },
    }


def _load(summary: dict, frame: pd.DataFrame) -> dict:
    cfg = summary.get("config") or {}
    load = cfg.get("load") or {}
    wl = cfg.get("workload") or {}
    source = "random" if str(wl.get("spec", "")).startswith("synthetic") else "sampled"
    standardized: dict = {
        "tool": "loadgen",
        "tool_version": str(cfg.get("loadgen_version") or ""),
        "parallelism": int(cfg.get("workers") or 1),
        "source": source,
        "input_seq_len": _seq_len(frame["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)),
        "output_seq_len": _seq_len(frame["completion_tokens"].to_numpy(dtype=float, na_value=np.nan)),
    }
    if load.get("rate") is not None:
        standardized["rate_qps"] = float(load["rate"])
    if load.get("concurrency") is not None:
        standardized["concurrency"] = int(load["concurrency"])
    conv = summary.get("conversations")
    if conv:
        turns = max((int(k) for k in conv.get("by_turn", {})), default=1)
        standardized["multi_turn"] = {"enabled": True, "max_turns": {"distribution": "other", "value": turns}}
    return {
        "metadata": {"schema_version": "0.0.1", "cfg_id": _uid(json.dumps(load, sort_keys=True), str(wl.get("spec")))},
        "standardized": standardized,
        "native": {"args": {"argv": cfg.get("argv")}, "config": {"load": load, "workload": wl}},
    }


def _aggregate(summary: dict, frame: pd.DataFrame) -> dict:
    measured = frame[frame["ok"] & ~frame["warmup"]]
    ntpot = (measured["e2e_ms"] / measured["completion_tokens"].astype(float)).to_numpy(dtype=float)
    latency = {
        "time_to_first_token": statistics(summary.get("ttft_ms"), "ms"),
        "normalized_time_per_output_token": statistics(describe(ntpot), "ms/token"),
        "time_per_output_token": statistics(summary.get("tpot_ms"), "ms/token"),
        "inter_token_latency": statistics(summary.get("itl_ms"), "ms/token"),
        "request_latency": statistics(summary.get("e2e_ms"), "ms"),
    }
    output = summary.get("output_throughput_tok_s")
    total = summary.get("total_throughput_tok_s")
    return {
        "requests": {
            "total": int(summary.get("completed", 0) + summary.get("failed", 0) + summary.get("cancelled", 0)),
            "failures": int(summary.get("failed", 0)),
            "incomplete": int(summary.get("cancelled", 0)),
            "input_length": statistics(
                describe(measured["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)), "count"
            ),
            "output_length": statistics(describe(measured["completion_tokens"].to_numpy(dtype=float)), "count"),
        },
        "latency": latency,
        "throughput": {
            "input_token_rate": _rate(None if output is None or total is None else total - output, "tokens/s"),
            "output_token_rate": _rate(output, "tokens/s"),
            "total_token_rate": _rate(total, "tokens/s"),
            "request_rate": _rate(summary.get("request_throughput_req_s"), "queries/s"),
        },
    }


_COLUMNS = ["ok", "warmup", "prompt_tokens", "completion_tokens", "e2e_ms"]


def _frame(sw: Sweep, key: str) -> pd.DataFrame:
    """The cell's requests, the columns the report reads (not its chunk lists: a day's run)."""
    from loadgen.results import store
    from loadgen.results.reading import ReportError

    path = sw.cell_dir(key) / store.REQUESTS
    try:
        return pd.read_parquet(path, columns=_COLUMNS)
    except (OSError, ValueError) as e:
        raise ReportError(f"{path} cannot be read ({type(e).__name__}: {e}); summarize the run again") from None


def cell_report(sw: Sweep, key: str) -> dict:
    """One measured cell (or the run) as a Benchmark Report."""
    summary = sw.summaries[key]
    frame = _frame(sw, key)
    row = sw.cells[sw.cells["path"] == key].iloc[0]
    cfg = summary.get("config") or {}
    start = float(cfg.get("started_unix") or 0.0)
    duration = float(summary.get("duration_s") or 0.0)
    sweep_id = _uid(str(sw.root.resolve()), str(sw.manifest.get("created_unix")))
    return {
        "version": VERSION,
        "run": {
            "uid": _uid(sweep_id, key),
            "eid": sweep_id,
            "time": {"start": _iso(start), "end": _iso(start + duration), "duration": f"PT{duration}S"},
            "description": f"loadgen {cfg.get('command', 'run')}: {row['variant']} on {row['workload']} at "
            f"{row['mode']} level {row['level']:g} ({key})",
            "keywords": ["loadgen", str(row["variant"]), str(row["workload"]), str(row["mode"])],
        },
        "scenario": {"stack": [_engine(sw, str(row["variant"]), summary)], "load": _load(summary, frame)},
        "results": {"request_performance": {"aggregate": _aggregate(summary, frame)}},
    }


def export(root: str | Path, out: str | Path | None = None) -> list[Path]:
    """Every measured cell of the sweep (or the run) at `root` as a Benchmark Report, written as
    JSON into `out` (default: ROOT/llmd); the files written."""
    from loadgen.results import store
    from loadgen.results.reading import read

    sw = read(root)
    target = Path(out) if out is not None else sw.root / "llmd"
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for key in sw.measured["path"]:
        path = target / ("benchmark_report.json" if sw.single else f"benchmark_report,{key.replace('/', '_')}.json")
        doc = cell_report(sw, key)
        store.atomic(path, lambda tmp, doc=doc: Path(tmp).write_text(json.dumps(doc, indent=1)))
        written.append(path)
    return written
