"""Production arrival traces: when each request came, and its input and output lengths (public
traces carry no text). `read_trace("FORMAT:PATH[,key=value...]")`:

- `azure`: Azure's LLM inference traces (CSV: `TIMESTAMP` as a date-time, `ContextTokens`,
  `GeneratedTokens`);
- `mooncake`: Mooncake / Alibaba-style JSONL (`timestamp` in ms, `input_length`,
  `output_length`, optional `hash_ids`: ids of the prompt's blocks, shared blocks shared text);
- `burstgpt`: BurstGPT-style CSV (`Timestamp` in s, `Request tokens`, `Response tokens`);
- `csv` / `jsonl`: any other, with its fields named: `time=COL,input=COL,output=COL` and
  `unit=s|ms|us|datetime` (default s), optional `hash_ids=COL` (in a CSV cell: a JSON list or
  integers separated by spaces, `;` or `|`).

Times become seconds from the trace's first request. A line that cannot be read (a time going
back, a negative length, a length that is not a whole number) is an error naming the file, the
line and the fix, or with `skip_bad` is skipped and counted. A length of 0 is read as 1 (a
request needs a prompt token and asks for at least one), counted as a repair.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import numpy as np

from workloads.errors import WorkloadError

FORMATS = {  # format -> (file kind, time column, unit, input column, output column, hash ids column)
    "azure": ("csv", "TIMESTAMP", "datetime", "ContextTokens", "GeneratedTokens", None),
    "mooncake": ("jsonl", "timestamp", "ms", "input_length", "output_length", "hash_ids"),
    "burstgpt": ("csv", "Timestamp", "s", "Request tokens", "Response tokens", None),
    "csv": ("csv", None, "s", None, None, None),
    "jsonl": ("jsonl", None, "s", None, None, None),
}
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class TraceError(WorkloadError):
    pass


@dataclass
class Trace:
    source: str
    t_s: np.ndarray  # seconds from the trace's first request (before any window)
    input_len: np.ndarray
    output_len: np.ndarray
    hash_ids: list[list[int]] | None = None
    skipped: int = 0
    bad: list[str] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t_s)

    def window(self, start_s: float = 0.0, duration_s: float | None = None, max_requests: int | None = None) -> Trace:
        """The requests from `start_s` (trace time) for `duration_s`, at most `max_requests`;
        their times still counted from the trace's start."""
        keep = self.t_s >= start_s
        if duration_s is not None:
            keep &= self.t_s < start_s + duration_s
        idx = np.flatnonzero(keep)[:max_requests]
        return replace(
            self,
            t_s=self.t_s[idx],
            input_len=self.input_len[idx],
            output_len=self.output_len[idx],
            hash_ids=None if self.hash_ids is None else [self.hash_ids[i] for i in idx],
        )


def _time(value, unit: str, where: str, col: str) -> float:
    if unit == "datetime":
        text = str(value).strip()
        head, _, frac = text.partition(".")  # Azure writes 7 fractional digits
        try:
            t = datetime.fromisoformat(head).timestamp()
            return t + (float("0." + frac) if frac else 0.0)
        except ValueError:
            raise TraceError(f"{where}: {col} is {text[:40]!r}, not a date-time like 2023-11-16 18:15:46.68") from None
    try:
        return float(value) * UNITS[unit]
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {col} is {str(value)[:40]!r}, not a number of {unit}") from None


def _length(value, where: str, col: str) -> int:
    try:
        n = float(value)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {col} is {str(value)[:40]!r}, not a whole number of tokens") from None
    if n != int(n) or n < 0:
        raise TraceError(f"{where}: {col} is {value!r}: lengths are whole numbers of tokens >= 0")
    return int(n)


def _hash_ids(value, where: str, col: str) -> list[int] | None:
    """A request's prompt block ids: a JSON list of integers (JSONL, or a CSV cell holding one,
    as pandas writes a list column), or a CSV cell of integers separated by spaces, `;` or `|`;
    empty: none."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = (
                json.loads(text)
                if text.startswith("[")
                else [int(x) for x in text.replace(";", " ").replace("|", " ").split()]
            )
        except ValueError:
            value = None
    if not (isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value)):
        raise TraceError(f"{where}: {col} must be a list of integers, like [1, 2, 3] or 1 2 3")
    return value


def _rows(path: Path, kind: str):
    """(line number, row dict) of a CSV (header first) or JSONL file."""
    try:
        f = open(path, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(f"cannot read trace {str(path)!r}: {e.strerror or e}") from None
    with f:
        if kind == "csv":
            reader = csv.DictReader(f)
            yield 1, reader.fieldnames or []
            for row in reader:
                yield reader.line_num, row
            return
        yield 0, None
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            yield no, obj


def _spec(text: str) -> tuple[str, str, dict, tuple]:
    """A trace spec's format, path, options given and fields (kind, time, unit, input, output,
    hash_ids columns), each checked: TraceError naming the fix."""
    fmt, _, rest = text.partition(":")
    if fmt not in FORMATS or not rest:
        raise TraceError(f"trace {text!r}: give FORMAT:PATH with FORMAT one of {', '.join(FORMATS)}")
    path, *pairs = rest.split(",")
    opts = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or k not in ("time", "input", "output", "unit", "hash_ids"):
            raise TraceError(
                f"trace {text!r}: options are time=COL, input=COL, output=COL, unit=s|ms|us|datetime, "
                f"hash_ids=COL; got {p!r}"
            )
        opts[k] = v
    kind, tcol, unit, icol, ocol, hcol = FORMATS[fmt]
    tcol, icol, ocol = opts.get("time", tcol), opts.get("input", icol), opts.get("output", ocol)
    unit, hcol = opts.get("unit", unit), opts.get("hash_ids", hcol)
    if None in (tcol, icol, ocol):
        raise TraceError(
            f"trace {text!r}: a {fmt} trace needs its fields named: {fmt}:{path},time=COL,input=COL,output=COL"
        )
    if unit not in (*UNITS, "datetime"):
        raise TraceError(f"trace {text!r}: unit must be s, ms, us or datetime, got {unit!r}")
    return fmt, path, opts, (kind, tcol, unit, icol, ocol, hcol)


def read_trace(text: str, *, skip_bad: bool = False) -> Trace:
    """A trace spec `FORMAT:PATH[,key=value...]` read whole (see the module docstring)."""
    fmt, path, opts, (kind, tcol, unit, icol, ocol, hcol) = _spec(text)
    times, ins, outs, hashes, bad = [], [], [], [], []
    repairs: dict[str, int] = {}
    rows = _rows(Path(path), kind)
    _, header = next(rows)
    if header is not None:
        missing = [c for c in (tcol, icol, ocol) if c not in header]
        if hcol and "hash_ids" in opts and hcol not in header:
            missing.append(hcol)
        if missing:
            fix = (
                f"name them: {fmt}:{path},time=COL,input=COL,output=COL"
                if fmt in ("csv", "jsonl")
                else f"is it a {fmt} trace? (csv:PATH,time=COL,input=COL,output=COL reads any CSV)"
            )
            raise TraceError(f"{path}:1: no column {', '.join(map(repr, missing))} (it has {', '.join(header)}); {fix}")
    last = None
    for no, row in rows:
        where = f"{path}:{no}"
        try:
            if not isinstance(row, dict):
                raise TraceError(f"{where}: not a JSON object")
            for c in (tcol, icol, ocol):
                if row.get(c) in (None, ""):
                    raise TraceError(f"{where}: missing field {c!r}")
            t = _time(row[tcol], unit, where, str(tcol))
            n_in, n_out = _length(row[icol], where, str(icol)), _length(row[ocol], where, str(ocol))
            if last is not None and t < last:
                raise TraceError(
                    f"{where}: {tcol} goes back in time ({t - last:+.3f} s after the line before); "
                    "sort the trace by time, or give --skip-bad to drop such lines"
                )
            h = _hash_ids(row.get(hcol), where, hcol) if hcol else None
        except TraceError as e:
            if not skip_bad:
                raise
            bad.append(str(e))
            continue
        for name, n in (("input length 0 read as 1", n_in), ("output length 0 read as 1", n_out)):
            if n == 0:
                repairs[name] = repairs.get(name, 0) + 1
        last = t
        times.append(t)
        ins.append(max(1, n_in))
        outs.append(max(1, n_out))
        hashes.append(h or [])
    if not times:
        raise TraceError(f"trace {text!r} has no readable requests" + (f" (first problem: {bad[0]})" if bad else ""))
    at = np.asarray(times, float)
    return Trace(
        text,
        at - at[0],
        np.asarray(ins, np.int64),
        np.asarray(outs, np.int64),
        hashes if any(hashes) else None,
        len(bad),
        bad,
        repairs,
    )
