"""The cells `loadgen fit` reads: every finished cell of the given sweeps, with its drafter, k,
workload kind and the engine's steps read off its chunk times (loadgen.measures.enginesteps)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from loadgen.errors import LoadgenError
from loadgen.whatif.fromrun import configured


@dataclass
class FitCell:
    sweep: Path
    key: str
    workload: str
    level: float
    method: str | None
    k: int
    kind: str  # the kind of request its workload holds (servers.emulator.content.classify)
    tput: float | None  # measured output tok/s
    steps: np.ndarray = field(repr=False)

    @property
    def path(self) -> Path:
        return self.sweep / "cells" / self.key


@dataclass
class Sweep:
    path: Path
    manifest: dict
    cells: list[FitCell]

    @property
    def model(self) -> str:
        return str(self.manifest.get("deployment", {}).get("model"))


def _kinds(manifest: dict) -> dict[str, str]:
    """workload label -> the kind most of its first requests read as (as the emulator reads a
    prompt), "" where the workload cannot be opened here."""
    from servers.emulator.content import classify
    from workloads import WorkloadError, open_workload

    plan = manifest.get("plan") or {}
    out = {}
    for spec, label in zip(plan.get("workloads") or [], plan.get("workload_labels") or []):
        try:
            reqs = list(open_workload(spec, data_dir=plan.get("data_dir")).requests(8, plan.get("seed", 0)))
        except (WorkloadError, OSError, ValueError):
            out[label] = ""
            continue
        texts = [r.prompt or " ".join(str(m.get("content", "")) for m in r.messages or ()) for r in reqs]
        out[label] = Counter(map(classify, texts)).most_common(1)[0][0] if texts else ""
    return out


def read_sweep(path: Path) -> Sweep:
    """A sweep's manifest and ok cells; LoadgenError (one line) for a directory that is none."""
    from loadgen.measures.enginesteps import engine_steps

    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        raise LoadgenError(
            f"{path}: no sweep there (no readable manifest.json); give a `loadgen sweep` --output"
        ) from None
    kinds = _kinds(manifest)
    found = []
    for f in sorted(path.glob("cells/*/*/*/summary.json")):
        try:
            s = json.loads(f.read_text())
            frame = pd.read_parquet(f.parent / "requests.parquet")
        except (OSError, ValueError):
            continue
        cell = s.get("cell") or {}
        if cell.get("status") != "ok" or not s.get("completed"):
            continue
        method, k = configured(s.get("config") or {})
        frame = frame[~frame["warmup"].fillna(False).astype(bool)]
        key = f"{f.parts[-4]}/{f.parts[-3]}/{f.parts[-2]}"
        found.append(
            FitCell(
                path, key, cell["workload"], float(cell["level"]), method, k, kinds.get(cell["workload"], ""),
                s.get("output_throughput_tok_s"), engine_steps(frame, k),
            )
        )  # fmt: skip
    return Sweep(path, manifest, found)
