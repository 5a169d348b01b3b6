"""Spec-Bench and MT-Bench `question.jsonl` (FastChat's format): `turns` (the user's turns),
optional `question_id`, `category` (absent or empty: the request has none) and `reference`
(an answer per turn). `turns=first` (default): the first turn; `turns=all`: every turn as its
own request, earlier turns answered by the reference (or a placeholder); `turns=session`: one
conversation per question, later turns sent with the server's actual replies."""

from __future__ import annotations

from workloads.errors import BadRecord
from workloads.loaders.base import CAP, Format, record_id
from workloads.request import Request


def _convert(name: str):
    def convert(where: str, row: dict, index: int, opts: dict) -> list[Request]:
        turns = row.get("turns")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
            raise BadRecord(where, "field 'turns' must be a non-empty list of text")
        category = row.get("category")  # optional metadata: absent or empty, the request has none
        category = category.strip() if isinstance(category, str) else ""
        given = row.get("reference")
        refs: list = given if isinstance(given, list) else []
        qid = record_id(row, ("question_id",), index)
        mode = opts.get("turns", "first")
        if mode == "session":
            rid = f"{name}-{qid}"
            return [
                Request(
                    id=rid,
                    prompt=turns[0],
                    messages=({"role": "user", "content": turns[0]},),
                    max_tokens=CAP,
                    workload=name,
                    category=category,
                    turn=1,
                    reference=refs[0] if refs and isinstance(refs[0], str) else None,
                    followups=tuple(turns[1:]),
                    session=rid,
                )
            ]
        which = range(len(turns)) if mode == "all" else range(1)
        out = []
        for i in which:
            messages = []
            for j in range(i):  # earlier turns: the user's, then the reference answer if any
                messages.append({"role": "user", "content": turns[j]})
                answer = refs[j] if j < len(refs) and isinstance(refs[j], str) else f"[answer {j + 1}]"
                messages.append({"role": "assistant", "content": answer})
            messages.append({"role": "user", "content": turns[i]})
            ref = refs[i] if i < len(refs) and isinstance(refs[i], str) else None
            out.append(
                Request(
                    id=f"{name}-{qid}" + (f"-t{i + 1}" if i else ""),
                    prompt=turns[0] if i == 0 else None,
                    messages=tuple(messages),
                    max_tokens=CAP,
                    workload=name,
                    category=category,
                    turn=i + 1,
                    reference=ref,
                )
            )
        return out

    return convert


SPEC_BENCH = Format(
    "spec_bench",
    _convert("spec_bench"),
    frozenset({"turns"}),
    categories=True,
    hub={"hemingkx/Spec-Bench": (None, "test")},
    file_kind="jsonl",
)
MT_BENCH = Format(
    "mt_bench",
    _convert("mt_bench"),
    frozenset({"turns"}),
    categories=True,
    hub={"philschmid/mt-bench": (None, "train")},
    file_kind="jsonl",
)
