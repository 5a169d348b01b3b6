"""Synthetic workloads that need no data set: offline, seeded, reproducible."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from workloads.request import Request

# Short, common English words: each is one token in the Llama, Qwen and GPT tokenizers, so a
# prompt of n words is close to n prompt tokens without needing a tokenizer.
_WORDS = (
    "the of and to in is it that for on was with he as at by this had not are but from or have "
    "an they which one you were her all she there would their we him been has when who will more "
    "no if out so said what up its about into than them can only other new some could time these "
    "two may then do first any my now such like our over man me even most made after also did "
    "many before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old year "
    "off come since against go came right used take three"
).split()


DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")


def lengths(rng: np.random.Generator, mean: int, dist: str, *, range_ratio: float = 0.25, sigma: float = 0.5) -> int:
    """One length >= 1 around `mean`: fixed; uniform within +-range_ratio; normal or lognormal
    with relative spread `sigma` (lognormal: mean preserved)."""
    if dist == "fixed":
        return mean
    if dist == "uniform":
        lo = max(1, int(round(mean * (1.0 - range_ratio))))
        hi = max(lo, int(round(mean * (1.0 + range_ratio))))
        return int(rng.integers(lo, hi + 1))
    if dist == "normal":
        return max(1, int(round(rng.normal(mean, sigma * mean))))
    if dist == "lognormal":
        s = math.sqrt(math.log(1.0 + sigma**2))
        return max(1, int(round(rng.lognormal(math.log(mean) - s * s / 2, s))))
    raise ValueError(f"unknown length distribution {dist!r}; valid: {', '.join(DISTRIBUTIONS)}")


def random_lengths(
    num: int | None,
    *,
    input_len: int = 256,
    output_len: int = 128,
    range_ratio: float = 0.25,
    seed: int = 0,
    workload: str = "synthetic",
    input_dist: str = "uniform",
    output_dist: str = "fixed",
    sigma: float = 0.5,
    exact=None,
) -> Iterator[Request]:
    """Random prompts of about `input_len` words (~tokens), asking for `output_len` tokens with
    `ignore_eos`, greedy; lengths drawn from `input_dist` / `output_dist`. `num=None` yields
    without end. Prompts are distinct random word sequences, so a prefix cache cannot shorten
    them. With `exact` (workloads.lengths.ExactLengths) prompt lengths are exact tokens."""
    if input_len < 1 or output_len < 1:
        raise ValueError("input_len and output_len must be >= 1")
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError("range_ratio must be in [0, 1)")
    rng = np.random.default_rng(seed)
    i = 0
    while num is None or i < num:
        n = lengths(rng, input_len, input_dist, range_ratio=range_ratio, sigma=sigma)
        out = lengths(rng, output_len, output_dist, range_ratio=range_ratio, sigma=sigma)
        yield Request(
            id=f"{workload}-{i}",
            prompt=exact.prompt(rng, n) if exact is not None else _words(rng, n),
            max_tokens=out,
            ignore_eos=True,
            sampling={"temperature": 0.0},
            workload=workload,
        )
        i += 1


_WORDS_TUPLE = tuple(_WORDS)


def _words(rng: np.random.Generator, n: int) -> str:
    return " ".join([_WORDS[w] for w in rng.integers(0, len(_WORDS), size=max(n, 0)).tolist()])


def _code(rng: np.random.Generator, n_words: int) -> str:
    """Python-looking code of about n_words whitespace-separated tokens."""
    lines, count, f = [], 0, 0
    while count < n_words:
        args = ", ".join(f"a{j}" for j in range(int(rng.integers(1, 4))))
        body = [f"def func_{f}({args}):"]
        for _ in range(int(rng.integers(2, 6))):
            v, c = int(rng.integers(0, 9)), int(rng.integers(1, 99))
            body.append(f"    v{v} = a0 * {c} + len(items_{v})")
        body.append(f"    return v{int(rng.integers(0, 9))}")
        lines.extend(body)
        count += sum(len(line.split()) for line in body)
        f += 1
    return "\n".join(lines)


# kind -> (make a prompt of about n words, mean prompt length, mean output length): the mean
# lengths of the data sets the study used for each kind (paper.md).
KINDS = {
    "chat": (lambda rng, n: "Please help me with this: " + _words(rng, n - 5) + "?", 355, 728),
    "summarization": (lambda rng, n: "Summarize the following article.\n" + _words(rng, n - 4), 838, 323),
    "math": (
        lambda rng, n: (
            "Solve the following math problem step by step. "
            + " ".join(f"{_words(rng, 6)} {int(rng.integers(2, 500))}" for _ in range(max(2, (n - 15) // 7)))
            + " How many are left in total?"
        ),
        94,
        166,
    ),
    "code_edit": (
        lambda rng, n: (
            "Edit the following code as instructed.\n```python\n"
            + _code(rng, n - 26)
            + "\n```\nInstruction: add type hints "
            "and a docstring to every function."
        ),
        171,
        262,
    ),
    "reasoning": (
        lambda rng, n: (
            "Think carefully, step by step, before you answer. "
            + " ".join(f"{_words(rng, 6)} {int(rng.integers(2, 500))}" for _ in range(max(2, (n - 12) // 7)))
            + " How many are there in total?"
        ),
        110,
        12000,
    ),
}


def kind_like(
    kind: str,
    num: int | None,
    *,
    input_len: int | None = None,
    output_len: int | None = None,
    ignore_eos: bool = False,
    seed: int = 0,
) -> Iterator[Request]:
    """Prompts of one kind (chat, summarization, math, code_edit, reasoning) whose length and
    markers resemble the data sets of that kind; `max_tokens` = `output_len` (default: the
    study's cap, 8192, or 32768 for reasoning, with the model stopping on its own)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    make, mean_in, _ = KINDS[kind]
    rng = np.random.default_rng(seed)
    n_in = input_len or mean_in
    i = 0
    while num is None or i < num:
        prompt = make(rng, max(20, int(rng.integers(int(n_in * 0.8), int(n_in * 1.2) + 1))))
        cap = 32768 if kind == "reasoning" else 8192
        yield Request(
            id=f"{kind}-{i}",
            prompt=prompt,
            max_tokens=output_len or cap,
            ignore_eos=ignore_eos,
            sampling={"temperature": 0.0},
            workload=kind,
            category=kind,
        )
        i += 1


def shared_prefix(
    num: int | None,
    *,
    prefix_len: int = 1000,
    suffix_len: int = 100,
    prefixes: int = 4,
    output_len: int = 128,
    seed: int = 0,
) -> Iterator[Request]:
    """Requests in `prefixes` groups; each group shares a `prefix_len`-word prefix (a system
    prompt, a document), then a distinct `suffix_len`-word question; `output_len` tokens each
    with ignore_eos. What a prefix cache can reuse."""
    if min(prefix_len, suffix_len, prefixes, output_len) < 1:
        raise ValueError("prefix_len, suffix_len, prefixes and output_len must be >= 1")
    rng = np.random.default_rng(seed)
    heads = [_words(rng, prefix_len) for _ in range(prefixes)]
    i = 0
    while num is None or i < num:
        g = int(rng.integers(0, prefixes))
        yield Request(
            id=f"shared_prefix-{i}",
            prompt=heads[g] + "\n" + _words(rng, suffix_len),
            max_tokens=output_len,
            ignore_eos=True,
            sampling={"temperature": 0.0},
            workload="shared_prefix",
            category=f"prefix-{g}",
        )
        i += 1


_TOOLS = (
    "search_code",
    "read_file",
    "write_file",
    "run_tests",
    "list_dir",
    "apply_patch",
    "query_db",
    "fetch_url",
    "send_message",
    "create_ticket",
)


def agentic(
    num: int | None,
    *,
    tasks: int = 8,
    template_len: int = 200,
    input_len: int = 60,
    output_len: int | None = None,
    ignore_eos: bool = False,
    seed: int = 0,
) -> Iterator[Request]:
    """Repeated agentic tasks: `tasks` task templates (an instruction of about `template_len`
    words and a tool list), each request one of them (uniformly) with its own input of about
    `input_len` words after a blank line. Requests of a task share the template, so a model
    answers them alike: the repetition suffix decoding feeds on across requests. Category:
    the task."""
    if min(tasks, template_len, input_len) < 1 or (output_len is not None and output_len < 1):
        raise ValueError("tasks, template_len, input_len and output_len must be >= 1")
    rng = np.random.default_rng(seed)
    templates = []
    for g in range(tasks):
        tools = " ".join(rng.choice(_TOOLS, size=4, replace=False).tolist())
        templates.append(
            f"You are an agent working on task {g}. {_words(rng, template_len)}\n"
            f"Available tools: {tools}\nAnswer with one tool call per step, as JSON."
        )
    i = 0
    while num is None or i < num:
        g = int(rng.integers(0, tasks))
        prompt = f"{templates[g]}\n\nInput: {_words(rng, input_len)} case {int(rng.integers(0, 10**6))}"
        yield Request(
            id=f"agentic-{i}",
            prompt=prompt,
            max_tokens=output_len or 8192,
            ignore_eos=ignore_eos,
            sampling={"temperature": 0.0},
            workload="agentic",
            category=f"task-{g}",
        )
        i += 1


def sessions(
    num: int | None, *, turns: int = 3, input_len: int = 100, output_len: int = 128, seed: int = 0
) -> Iterator[Request]:
    """Multi-turn conversations: `turns` user turns of about `input_len` words each (a chat
    question), each reply `output_len` tokens with ignore_eos. Turn n+1 is sent with the whole
    history, the server's replies included (loadgen.executors.conversation). Category: chat."""
    if min(turns, input_len, output_len) < 1:
        raise ValueError("turns, input_len and output_len must be >= 1")
    rng = np.random.default_rng(seed)

    def question() -> str:
        return "Please help me with this: " + _words(rng, max(1, input_len - 5)) + "?"

    i = 0
    while num is None or i < num:
        first = question()
        rid = f"session-{i}"
        yield Request(
            id=rid,
            prompt=first,
            messages=({"role": "user", "content": first},),
            max_tokens=output_len,
            ignore_eos=True,
            sampling={"temperature": 0.0},
            workload="session",
            category="chat",
            turn=1,
            followups=tuple(question() for _ in range(turns - 1)),
            session=rid,
        )
        i += 1


_TOOL_DEFS = (
    ("search_docs", "query", "Search the product documentation"),
    ("get_weather", "city", "Current weather for a city"),
    ("run_sql", "statement", "Run a read-only SQL statement on the analytics database"),
    ("read_file", "path", "Read a file from the repository"),
)


def tool_use(
    num: int | None,
    *,
    turns: int = 3,
    input_len: int = 120,
    result_len: int = 80,
    output_len: int = 2048,
    seed: int = 0,
):
    """Agents calling tools: each conversation starts with a user's task and the tools (2-4 of
    _TOOL_DEFS, as OpenAI `tools`); a model that calls one gets the tool's result back in the next
    turn (a JSON text of `result_len` words), `turns` turns in all. What `--enable-auto-tool-choice`
    serves (docs/reasoning.md). Output lengths are the model's own (no ignore_eos), at most
    `output_len`."""
    if min(turns, input_len, result_len, output_len) < 1:
        raise ValueError("turns, input_len, result_len and output_len must be >= 1")
    rng = np.random.default_rng(seed)
    i = 0
    while num is None or i < num:
        picked = rng.choice(len(_TOOL_DEFS), size=int(rng.integers(2, len(_TOOL_DEFS) + 1)), replace=False)
        tools = tuple(
            {
                "type": "function",
                "function": {
                    "name": _TOOL_DEFS[k][0],
                    "description": _TOOL_DEFS[k][2],
                    "parameters": {
                        "type": "object",
                        "properties": {_TOOL_DEFS[k][1]: {"type": "string"}},
                        "required": [_TOOL_DEFS[k][1]],
                    },
                },
            }
            for k in sorted(picked)
        )
        task = "Use the tools to answer this: " + _words(rng, max(5, input_len - 7))
        results = tuple(
            '{"result": "' + _words(rng, max(1, result_len - 2)) + '", "ok": true}' for _ in range(turns - 1)
        )
        rid = f"tool_use-{i}"
        yield Request(
            id=rid,
            prompt=task,
            messages=({"role": "user", "content": task},),
            max_tokens=output_len,
            sampling={"temperature": 0.0},
            workload="tool_use",
            category="agentic",
            turn=1,
            followups=results,
            session=rid,
            tools=tools,
        )
        i += 1


# synthetic:KIND -> (generator, {option: converter}); every option is optional.
def _int(v: str) -> int:
    return int(v)


def _float(v: str) -> float:
    return float(v)


def _bool(v: str) -> bool:
    if v.lower() in ("1", "true", "yes"):
        return True
    if v.lower() in ("0", "false", "no"):
        return False
    raise ValueError(f"expected true or false, got {v!r}")


KIND_OPTIONS = {"input_len": _int, "output_len": _int, "ignore_eos": _bool}


def _like(kind: str) -> Callable[..., Iterator[Request]]:
    return lambda num, **kw: kind_like(kind, num, **kw)


SYNTHETIC: dict[str, tuple[Callable[..., Iterator[Request]], Mapping[str, Callable[[str], Any]]]] = {
    "random": (
        random_lengths,
        {
            "input_len": _int,
            "output_len": _int,
            "range_ratio": _float,
            "input_dist": str,
            "output_dist": str,
            "sigma": _float,
        },
    ),
    "shared_prefix": (shared_prefix, {"prefix_len": _int, "suffix_len": _int, "prefixes": _int, "output_len": _int}),
    "session": (sessions, {"turns": _int, "input_len": _int, "output_len": _int}),
    "tool_use": (tool_use, {"turns": _int, "input_len": _int, "result_len": _int, "output_len": _int}),
    "agentic": (
        agentic,
        {"tasks": _int, "template_len": _int, "input_len": _int, "output_len": _int, "ignore_eos": _bool},
    ),
    **{k: (_like(k), KIND_OPTIONS) for k in KINDS},
}


def generator(kind: str, options: dict[str, str], seed: int, tokenizer=None):
    """A seeded endless generator for `synthetic:KIND,options`; with a tokenizer, random
    prompts have exact token lengths."""
    if kind not in SYNTHETIC:
        raise ValueError(f"unknown synthetic kind {kind!r}; valid: {', '.join(SYNTHETIC)}")
    make, allowed = SYNTHETIC[kind]
    kwargs = {}
    for key, value in options.items():
        if key not in allowed:
            raise ValueError(f"synthetic:{kind} takes no option {key!r}; valid: {', '.join(allowed) or 'none'}")
        try:
            kwargs[key] = allowed[key](value)
        except ValueError:
            raise ValueError(f"synthetic:{kind}: {key}={value!r} is not a valid value") from None
    if tokenizer is not None and kind == "random":
        from workloads.lengths import for_tokenizer

        kwargs["exact"] = for_tokenizer(tokenizer, _WORDS_TUPLE)
    next(make(1, seed=seed, **kwargs))  # validate now, not at the first request
    return lambda s: make(None, seed=s, **kwargs)
