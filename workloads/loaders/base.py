"""What every loader shares: reading a required field, and the loader description."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from workloads.errors import BadRecord
from workloads.request import Request

CAP = 8192  # the study's output cap; a loader's requests start with it (see workloads.policy)


@dataclass(frozen=True)
class Format:
    """A data-set format: how one record becomes requests, which options it takes, whether
    its records have categories, and which hub data sets it reads (hub id -> config, split)."""

    name: str
    convert: Callable[[str, dict, int, dict], list[Request]]  # (where, record, index, options)
    options: frozenset = frozenset()
    categories: bool = False
    hub: dict = field(default_factory=dict)
    file_kind: str = "auto"  # how a local file is read: auto (by extension), jsonl, json


def text(row: dict, key: str, where: str) -> str:
    v = row.get(key)
    if v is None:
        raise BadRecord(where, f"missing field {key!r}")
    if not isinstance(v, str) or not v.strip():
        raise BadRecord(where, f"field {key!r} must be non-empty text")
    return v


def optional_text(row: dict, key: str) -> str | None:
    v = row.get(key)
    return v if isinstance(v, str) and v.strip() else None


def record_id(row: dict, keys, index: int) -> str:
    for k in keys:
        if row.get(k) not in (None, ""):
            return str(row[k])
    return str(index)
