"""Named workloads (catalog/*.toml): the study's six, each with its sources in order of
preference, an offline synthetic stand-in, a sample size and an output-length policy."""

from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from workloads.errors import WorkloadError
from workloads.spec import parse

CATALOG_DIR = Path(__file__).parent / "catalog"


@dataclass(frozen=True)
class Entry:
    name: str
    description: str
    sources: tuple[str, ...]  # "{data}" is the data directory
    standin: str
    sample: int
    output: str | None


@cache
def entries() -> dict[str, Entry]:
    out = {}
    for path in sorted(CATALOG_DIR.glob("*.toml")):
        raw = tomllib.loads(path.read_text())
        out[path.stem] = Entry(
            path.stem, raw["description"], tuple(raw["sources"]), raw["standin"], int(raw["sample"]), raw.get("output")
        )
    return out


def entry(name: str) -> Entry:
    if name not in entries():
        raise WorkloadError(
            f"unknown workload {name!r}; the catalog has {', '.join(entries())} "
            "(or give FORMAT:PATH, hf:ID or synthetic:KIND)"
        )
    return entries()[name]


def data_dir(explicit: str | None) -> Path | None:
    d = explicit or os.environ.get("LOADGEN_DATA_DIR")
    return Path(d).expanduser() if d else None


def candidates(e: Entry, data: Path | None) -> list[tuple[str, str | None]]:
    """(workload spec, reason it cannot be used or None) for each source, in order."""
    out: list[tuple[str, str | None]] = []
    for src in e.sources:
        if "{data}" in src:
            if data is None:
                out.append((src, "no data directory (--data-dir or LOADGEN_DATA_DIR)"))
                continue
            src = src.replace("{data}", str(data))
            path = parse(src).path
            out.append((src, None if path and Path(path).is_file() else f"no file {path}"))
        elif src.startswith("hf:"):
            have = importlib.util.find_spec("datasets") is not None
            out.append((src, None if have else "the hub needs pip install 'loadgen[hf]'"))
        else:
            out.append((src, None))
    return out
