"""ShareGPT: a JSON list of `{id, conversations: [{from: human|gpt|system, value}]}`. By
default the first human turn (vLLM's benchmarks do the same); `turns=all` sends the whole
conversation up to its last human turn, the recorded replies included; `turns=session` makes it
a multi-turn conversation: its human turns in order, each sent with the history before it and
the server's own replies in place of the recorded ones."""

from __future__ import annotations

from workloads.errors import BadRecord
from workloads.loaders.base import CAP, Format, record_id
from workloads.request import Request

_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "system": "system",
}


def convert(where: str, row: dict, index: int, opts: dict) -> list[Request]:
    conv = row.get("conversations")
    if not isinstance(conv, list) or not conv:
        raise BadRecord(where, "field 'conversations' must be a non-empty list")
    turns = []
    for t in conv:
        if not isinstance(t, dict) or not isinstance(t.get("value"), str) or t.get("from") not in _ROLES:
            raise BadRecord(where, "each conversation turn needs 'from' (human/gpt/system) and text 'value'")
        turns.append({"role": _ROLES[t["from"]], "content": t["value"]})
    users = [i for i, t in enumerate(turns) if t["role"] == "user" and t["content"].strip()]
    if not users:
        raise BadRecord(where, "the conversation has no human turn")
    mode = opts.get("turns", "first")
    rid = f"sharegpt-{record_id(row, ('id',), index)}"
    if mode == "session":
        head = tuple(t for t in turns[: users[0]] if t["role"] == "system") + (turns[users[0]],)
        reply = (
            turns[users[0] + 1]["content"]
            if users[0] + 1 < len(turns) and turns[users[0] + 1]["role"] == "assistant"
            else None
        )
        return [
            Request(
                id=rid,
                messages=head,
                max_tokens=CAP,
                workload="sharegpt",
                category="chat",
                turn=1,
                reference=reply,
                followups=tuple(turns[i]["content"] for i in users[1:]),
                session=rid,
            )
        ]
    last = users[0] if mode == "first" else users[-1]
    reply = turns[last + 1]["content"] if last + 1 < len(turns) and turns[last + 1]["role"] == "assistant" else None
    if mode == "first":
        return [
            Request(
                id=rid,
                prompt=turns[last]["content"],
                max_tokens=CAP,
                workload="sharegpt",
                category="chat",
                turn=1,
                reference=reply,
            )
        ]
    messages = tuple(turns[: last + 1])
    return [
        Request(
            id=rid,
            messages=messages,
            max_tokens=CAP,
            workload="sharegpt",
            category="chat",
            turn=sum(t["role"] == "user" for t in messages),
            reference=reply,
        )
    ]


SHAREGPT = Format("sharegpt", convert, frozenset({"turns"}), file_kind="json")
