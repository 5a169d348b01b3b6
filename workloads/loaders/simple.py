"""Single-turn data sets: GSM8K, HumanEval, CNN/DailyMail, AIME."""

from __future__ import annotations

from workloads.loaders.base import CAP, Format, optional_text, record_id, text
from workloads.request import Request

REASONING_CAP = 32768  # the study's cap for reasoning outputs


def gsm8k(where: str, row: dict, index: int, opts: dict) -> list[Request]:
    q = text(row, "question", where)
    return [
        Request(
            id=f"gsm8k-{record_id(row, ('id',), index)}",
            prompt=f"Solve the following math problem step by step.\n{q}",
            max_tokens=CAP,
            workload="gsm8k",
            category="math",
            turn=1,
            reference=optional_text(row, "answer"),
        )
    ]


def humaneval(where: str, row: dict, index: int, opts: dict) -> list[Request]:
    code = text(row, "prompt", where)
    chat = ({"role": "user", "content": f"Complete the following Python function.\n```python\n{code}```"},)
    return [
        Request(
            id=record_id(row, ("task_id",), index),
            prompt=code,
            messages=chat,
            max_tokens=CAP,
            workload="humaneval",
            category="code_generation",
            turn=1,
            reference=optional_text(row, "canonical_solution"),
        )
    ]


def cnn_dailymail(where: str, row: dict, index: int, opts: dict) -> list[Request]:
    article = text(row, "article", where)
    return [
        Request(
            id=f"cnn-{record_id(row, ('id',), index)}",
            prompt=f"Summarize the following news article in a few sentences.\n\n{article}",
            max_tokens=CAP,
            workload="cnn_dailymail",
            category="summarization",
            turn=1,
            reference=optional_text(row, "highlights"),
        )
    ]


def aime(where: str, row: dict, index: int, opts: dict) -> list[Request]:
    problem = text(row, "problem", where)
    return [
        Request(
            id=f"aime-{record_id(row, ('id',), index)}",
            prompt=f"{problem}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
            max_tokens=REASONING_CAP,
            workload="aime",
            category="reasoning",
            turn=1,
        )
    ]


GSM8K = Format("gsm8k", gsm8k, hub={"openai/gsm8k": ("main", "test")})
HUMANEVAL = Format("humaneval", humaneval, hub={"openai/openai_humaneval": (None, "test")})
CNN_DAILYMAIL = Format("cnn_dailymail", cnn_dailymail, hub={"abisee/cnn_dailymail": ("3.0.0", "test")})
AIME = Format("aime", aime, hub={"AI-MO/aimo-validation-aime": (None, "train")})
