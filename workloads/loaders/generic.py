"""Your own records (JSON lines, CSV or parquet) with a field mapping:
`prompt=FIELD` (default `prompt`) or `messages=FIELD` (a list of {role, content}),
`reference=FIELD` (the expected answer), `id=FIELD`, `category_field=FIELD`."""

from __future__ import annotations

import json

from workloads.errors import BadRecord
from workloads.loaders.base import CAP, Format, optional_text, record_id, text
from workloads.request import Request


def convert(where: str, row: dict, index: int, opts: dict) -> list[Request]:
    messages = None
    if "messages" in opts:
        raw = row.get(opts["messages"])
        if isinstance(raw, str):  # CSV cells hold JSON text
            try:
                raw = json.loads(raw)
            except ValueError:
                raise BadRecord(where, f"field {opts['messages']!r} is not a JSON list of messages") from None
        if (
            not isinstance(raw, list)
            or not raw
            or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in raw
            )
        ):
            raise BadRecord(where, f"field {opts['messages']!r} must be a list of {{role, content}}")
        messages = tuple({"role": m["role"], "content": m["content"]} for m in raw)
        prompt = None
    else:
        prompt = text(row, opts.get("prompt", "prompt"), where)
    category = str(row.get(opts["category_field"], "")) if "category_field" in opts else ""
    ref = optional_text(row, opts["reference"]) if "reference" in opts else None
    return [
        Request(
            id=record_id(row, (opts.get("id", "id"),), index),
            prompt=prompt,
            messages=messages,
            max_tokens=CAP,
            workload="custom",
            category=category,
            turn=1,
            reference=ref,
        )
    ]


OPTIONS = frozenset({"prompt", "messages", "reference", "id", "category_field"})
JSONL = Format("jsonl", convert, OPTIONS, categories=True, file_kind="jsonl")
CSV = Format("csv", convert, OPTIONS, categories=True)
PARQUET = Format("parquet", convert, OPTIONS, categories=True)
