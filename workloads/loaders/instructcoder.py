"""InstructCoder: code plus an edit instruction, so the expected output repeats most of the
code. Reads the `edit_eval` format (`task_id`, `instruction`, `context`, `input`, `output`)
and the hub's `likaixin/InstructCoder` (`instruction`, `input`, `output`)."""

from __future__ import annotations

from workloads.loaders.base import CAP, Format, optional_text, record_id, text
from workloads.request import Request


def convert(where: str, row: dict, index: int, opts: dict) -> list[Request]:
    instruction = text(row, "instruction", where).strip()
    code = text(row, "input", where)
    context = optional_text(row, "context")
    prompt = (
        f"{context.strip()}\n\n" if context else ""
    ) + f"{instruction}\n```python\n{code.rstrip()}\n```\nRewrite the code with this change."
    return [
        Request(
            id=f"instructcoder-{record_id(row, ('task_id', 'id'), index)}",
            prompt=prompt,
            max_tokens=CAP,
            workload="instructcoder",
            category="code_edit",
            turn=1,
            reference=optional_text(row, "output"),
        )
    ]


INSTRUCTCODER = Format("instructcoder", convert, hub={"likaixin/InstructCoder": (None, "train")})
