"""Reading records from files: JSON lines (optionally gzipped), a JSON list, CSV, parquet.
Each record comes with where it came from (`file:line` or `file:record N`), for errors."""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

from workloads.errors import BadRecord, WorkloadError


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def check_file(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise WorkloadError(f"{path}: no such file; pass the path of the data set file")
    if p.stat().st_size == 0:
        raise WorkloadError(f"{path}: the file is empty")
    return p


def jsonl(path: str | Path) -> Iterator[tuple[str, dict | BadRecord]]:
    p = check_file(path)
    seen = False
    with _open_text(p) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p}:{n}"
            try:
                obj = json.loads(line)
            except ValueError as e:
                yield where, BadRecord(where, f"not valid JSON ({getattr(e, 'msg', e)})")
                continue
            if not isinstance(obj, dict):
                yield where, BadRecord(where, "not a JSON object")
                continue
            seen = True
            yield where, obj
    if not seen:
        raise WorkloadError(f"{p}: no records (an empty or blank file)")


def json_list(path: str | Path) -> Iterator[tuple[str, dict | BadRecord]]:
    p = check_file(path)
    try:
        with _open_text(p) as f:
            data = json.load(f)
    except ValueError as e:
        raise WorkloadError(f"{p}: not valid JSON ({e}); expected a JSON list of records") from None
    if not isinstance(data, list):
        raise WorkloadError(f"{p}: expected a JSON list of records, got {type(data).__name__}")
    if not data:
        raise WorkloadError(f"{p}: no records (an empty list)")
    for n, obj in enumerate(data, 1):
        where = f"{p}: record {n}"
        yield where, (obj if isinstance(obj, dict) else BadRecord(where, "not a JSON object"))


def csv_rows(path: str | Path) -> Iterator[tuple[str, dict]]:
    p = check_file(path)
    with _open_text(p) as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            raise WorkloadError(f"{p}: no header row")
        for n, row in enumerate(reader, 2):
            yield f"{p}:{n}", row


def parquet_rows(path: str | Path) -> Iterator[tuple[str, dict]]:
    import pyarrow.parquet as pq

    p = check_file(path)
    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow raises its own error types
        raise WorkloadError(f"{p}: cannot read parquet ({e})") from None
    for n, row in enumerate(table.to_pylist(), 1):
        yield f"{p}: row {n}", row


def records(path: str | Path) -> Iterator[tuple[str, dict | BadRecord]]:
    """By extension: .jsonl/.jsonl.gz, .json (a list), .csv, .parquet."""
    name = str(path).lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        return jsonl(path)
    if name.endswith((".json", ".json.gz")):
        return json_list(path)
    if name.endswith((".csv", ".csv.gz")):
        return csv_rows(path)
    if name.endswith(".parquet"):
        return parquet_rows(path)
    raise WorkloadError(f"{path}: unknown file type; use .jsonl, .json, .csv or .parquet")
