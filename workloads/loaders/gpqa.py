"""GPQA (gated, `Idavidrein/gpqa`): a multiple-choice question with its answers. Its authors ask
that its questions never appear in plain text online, so these requests are `sensitive`: their
text is sent to the server and nowhere else (results keep ids and lengths; errors and
`loadgen workloads show` quote nothing)."""

from __future__ import annotations

import hashlib

from workloads.errors import BadRecord
from workloads.loaders.base import Format, record_id
from workloads.loaders.simple import REASONING_CAP
from workloads.request import Request

FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def convert(where: str, row: dict, index: int, opts: dict) -> list[Request]:
    values = []
    for key in FIELDS:
        v = row.get(key)
        if not isinstance(v, str) or not v.strip():
            raise BadRecord(where, f"missing field {key!r}")  # never quote the content
        values.append(v.strip())
    rid = record_id(row, ("Record ID", "id"), index)
    choices = values[1:]
    order = sorted(range(4), key=lambda i: hashlib.blake2b(f"{rid}{i}".encode(), digest_size=4).digest())
    lines = "\n".join(f"{'ABCD'[n]}) {choices[i]}" for n, i in enumerate(order))
    prompt = f"{values[0]}\n\n{lines}\n\nThink step by step, then answer with the letter of the correct choice."
    return [
        Request(
            id=f"gpqa-{rid}",
            prompt=prompt,
            max_tokens=REASONING_CAP,
            workload="gpqa",
            category="reasoning",
            turn=1,
            sensitive=True,
        )
    ]


GPQA = Format("gpqa", convert, hub={"Idavidrein/gpqa": ("gpqa_main", "train")})
