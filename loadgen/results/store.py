"""Writing results: `summary.json` and `requests.parquet`, each written to a temporary file
and renamed into place, so a reader never sees half a file."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pandas as pd

SUMMARY = "summary.json"
REQUESTS = "requests.parquet"
TIMELINE = "timeline.parquet"  # a run's whole timeline, where summary.json keeps it coarsened


class OutputError(OSError):
    pass


def prepare(directory: str | Path) -> Path:
    """Create the output directory and prove it is writable, before any load is sent."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as e:
        raise OutputError(
            f"cannot write to output directory {str(path)!r}: {e.strerror or e}; choose another --output"
        ) from None
    return path


def _clean(obj):
    """JSON has no NaN or infinity: write null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic(path: Path, write) -> None:
    """`write(tmp_path)`, then rename it to `path` (with the permissions a plain open would
    give it: mkstemp's are owner-only)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(_clean(obj), f, indent=2, allow_nan=False)
            f.write("\n")

    atomic(path, write)
    return path


def write_summary(directory: Path, summary: dict) -> Path:
    """summary.json; a timeline longer than an hour of samples goes whole to timeline.parquet
    and, coarsened (its sums unchanged), into the summary (loadgen.measures.timeline)."""
    from loadgen.measures import timeline

    tl = summary.get("timeline")
    if tl and len(tl["t_s"]) > timeline.MOST:
        table = timeline.table(tl)
        atomic(directory / TIMELINE, lambda tmp: table.to_parquet(tmp, index=False, engine="pyarrow"))
        summary = {**summary, "timeline": timeline.coarsen(tl)}
    return write_json(directory / SUMMARY, summary)


def write_requests(directory: Path, frame: pd.DataFrame) -> Path:
    path = directory / REQUESTS
    atomic(path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))
    return path


def read_requests(directory: str | Path) -> pd.DataFrame:
    return pd.read_parquet(Path(directory) / REQUESTS)


def read_summary(directory: str | Path) -> dict:
    with open(Path(directory) / SUMMARY) as f:
        return json.load(f)
