"""A sweep's results directory, read for a report: what is there, and what is missing.

The cells come from each cell's own summary.json (the truth; cells.parquet is rebuilt from
them), so a report works on a sweep that was interrupted, and says which planned cells are
missing, failed or unreadable instead of failing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from loadgen.outputs import journal
from loadgen.planning.plan import Cell, Plan
from loadgen.results import cells, manifest, store


class ReportError(ValueError):
    pass


@dataclass
class Sweep:
    root: Path
    manifest: dict
    cells: pd.DataFrame  # one row per readable measurement (cells.row), ok or not
    summaries: dict[str, dict]  # measurement key (path) -> summary.json
    planned: list[str] = field(default_factory=list)  # every cell key of the plan, in order
    unreadable: list[str] = field(default_factory=list)  # cell directories whose summary is broken

    @property
    def measured(self) -> pd.DataFrame:
        """Every measurement that ended ok: with --repeats, a row per repeat (`repeat`, `cell`)."""
        return self.cells[self.cells["status"] == "ok"] if len(self.cells) else self.cells

    @property
    def ok(self) -> pd.DataFrame:
        """One row per cell that has an ok measurement: its figures, or with repeats the mean
        over them (counts too), flags set where any repeat has them; `repeats` how many, `path`
        the cell's key (VARIANT/WORKLOAD/LEVEL)."""
        if self._ok is None:
            self._ok = combine(self.measured)
        return self._ok

    @property
    def has_repeats(self) -> bool:
        return bool(len(self.measured)) and bool((self.measured["repeat"] > 1).any())

    @property
    def missing(self) -> list[str]:
        have = (set(self.cells["path"]) if len(self.cells) else set()) | set(self.unreadable)
        return [k for k in self.planned if k not in have]

    @property
    def baseline(self) -> str:
        return (self.manifest.get("plan") or {}).get("baseline", "baseline")

    @property
    def model(self) -> str | None:
        return (self.manifest.get("deployment") or {}).get("model")

    _frames: dict = field(default_factory=dict, repr=False)
    _ok: pd.DataFrame | None = field(default=None, repr=False)
    single: bool = False  # a single run's directory, read as a sweep of one cell

    def cell_dir(self, key: str) -> Path:
        return self.root if self.single else self.root / cells.CELLS / key

    def requests(self, key: str) -> pd.DataFrame | None:
        """The cell's per-request frame (read once), or None when it cannot be read."""
        if key not in self._frames:
            try:
                self._frames[key] = pd.read_parquet(self.cell_dir(key) / store.REQUESTS)
            except (OSError, ValueError):
                self._frames[key] = None
        return self._frames[key]


FLAG_COLUMNS = ("client_bound", "server_behind", "server_restarted", "short_of_users")
_TEXT = ("variant", "workload", "workload_spec", "mode", "status", "error", "cell", "path")


def combine(measured: pd.DataFrame) -> pd.DataFrame:
    """Per cell (`cell`), its ok measurements in one row: numbers averaged, flags any, the
    throughput's spread over them (`output_throughput_tok_s_sd`, sample SD; NaN with one)."""
    if measured.empty:
        return measured.assign(repeats=pd.Series(dtype=int))
    rows = []
    for key, g in measured.groupby("cell", sort=False):
        row = g.iloc[0].to_dict()
        for col in g.columns:
            if col in FLAG_COLUMNS:
                row[col] = bool(g[col].fillna(False).astype(bool).any())
            elif col not in _TEXT and col not in ("level", "repeat") and pd.api.types.is_numeric_dtype(g[col]):
                row[col] = g[col].mean() if g[col].notna().any() else row[col]
        row.update(
            path=key,
            repeat=None,
            repeats=len(g),
            output_throughput_tok_s_sd=g["output_throughput_tok_s"].std(ddof=1) if len(g) > 1 else float("nan"),
        )
        rows.append(row)
    return pd.DataFrame(rows)


def read(root: str | Path) -> Sweep:
    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"{root} is not a directory; give the --output directory of a sweep")
    try:
        found = results_manifest(root)
    except ValueError as e:
        raise ReportError(f"{root / cells.MANIFEST} is not valid JSON ({e}); it is not a readable sweep") from None
    if found is None and ((root / store.SUMMARY).is_file() or journal.exists(root)):
        return single_run(root)
    if found is None:
        raise ReportError(
            f"{root} holds no sweep ({cells.MANIFEST} is missing) nor a run ({store.SUMMARY}); give the "
            "--output directory of `loadgen sweep` or `loadgen run`"
        )
    summaries, rows, unreadable = {}, [], []
    base = root / cells.CELLS
    for path in sorted(base.glob("*/*/*/")) if base.is_dir() else []:
        if path.name.startswith("."):
            continue  # a cell being written
        try:
            with open(path / store.SUMMARY) as f:
                summary = json.load(f)
            row = cells.row(summary)
        except (OSError, ValueError, KeyError, TypeError):
            unreadable.append(str(path.relative_to(base)))
            continue
        summaries[row["path"]] = summary
        rows.append(row)
    planned = _planned(found)
    rank = {k: i for i, k in enumerate(planned)}
    rows.sort(key=lambda r: rank.get(r["path"], len(rank)))
    table = pd.DataFrame(rows)
    if table.empty:
        why = f"; {len(unreadable)} cell(s) unreadable: {', '.join(unreadable[:3])}" if unreadable else ""
        raise ReportError(
            f"{root} holds no finished cells yet{why}; run or resume the sweep (loadgen sweep --resume --output {root})"
        )
    return Sweep(root, found, table, summaries, planned, unreadable)


def single_run(root: Path) -> Sweep:
    """A run's directory (`loadgen run --output`, a sweep cell's, a capacity probe's) as a sweep
    of one cell: its variant the server's speculative config (or "run"), its level the run's
    load, so the report's tables and charts (latency, acceptance, per request) come out for it.
    A run cut short before its summary was written is summarized from its journal first."""
    if not (root / store.SUMMARY).is_file():
        from loadgen.errors import LoadgenError
        from loadgen.results.recover import summarize_dir

        try:
            _, summary = summarize_dir(root)
        except LoadgenError as e:
            raise ReportError(str(e)) from None
        store.write_summary(root, summary)
    try:
        summary = json.loads((root / store.SUMMARY).read_text())
        config = summary["config"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ReportError(f"{root / store.SUMMARY} is not a readable run summary ({type(e).__name__}: {e})") from None
    if "cell" not in summary:
        load = config.get("load") or {}
        closed = load.get("mode") == "closed" or load.get("rate") is None
        level = float(load.get("concurrency") or load.get("peak") or 1) if closed else float(load["rate"])
        spec = config.get("speculative_config")
        variant = "run" if not spec else f"run ({json.loads(spec).get('method', 'sd')})" if spec[:1] == "{" else "run"
        workload = (config.get("workload") or {}).get("name") or "workload"
        cell = Cell(variant, workload.replace("/", "-"), level, "closed" if closed else "open")
        summary["cell"] = {
            "key": cell.key,
            "variant": cell.variant,
            "workload": cell.workload,
            "workload_spec": (config.get("workload") or {}).get("spec") or workload,
            "mode": cell.mode,
            "level": cell.level,
            "status": "ok" if summary.get("completed") else "failed",
            "error": None,
        }
    row = cells.row(summary)
    manifest = {"plan": {"baseline": row["variant"]}, "deployment": {"model": config.get("model")}, "single_run": True}
    return Sweep(root, manifest, pd.DataFrame([row]), {row["path"]: summary}, [row["path"]], [], single=True)


def results_manifest(root: Path) -> dict | None:
    m = manifest.read(root)
    if m is not None and not isinstance(m, dict):
        raise ValueError("not an object")
    return m


def _planned(manifest: dict) -> list[str]:
    try:
        return [c.key for c in Plan.from_dict(manifest["plan"]).cells()]
    except (KeyError, TypeError, ValueError):
        return []


def summaries(path: Path) -> dict[str, dict]:
    """The summaries under `path`: a run's directory (one), or a sweep's (one per finished
    cell); anything else is a LoadgenError."""
    from loadgen.errors import LoadgenError

    if (path / store.SUMMARY).is_file():
        try:
            return {path.name: json.loads((path / store.SUMMARY).read_text())}
        except ValueError as e:
            raise LoadgenError(f"{path / store.SUMMARY} is not valid JSON ({e})") from None
    try:
        sweep = read(path)
    except ReportError as e:
        raise LoadgenError(f"--results {path}: not a run ({store.SUMMARY} missing) nor a sweep: {e}") from None
    return {key: sweep.summaries[key] for key in sweep.measured["path"]}
