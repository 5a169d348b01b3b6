"""The emulated model: what it reads (tokens of a prompt) and what it writes.

Tokens are whitespace-separated words. A prompt's words map to stable ids; the model's output
alternates stretches of new text with stretches copied from the prompt (quotes, names, code
being edited), in proportions that depend on the kind of request. That overlap is what an
n-gram drafter can exploit, so n-gram acceptance comes out of the content itself. Everything
is deterministic in (seed, prompt): the same prompt gives the same output, as greedy decoding
does.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

import numpy as np

CLASSES = ("chat", "summarization", "math", "code_edit", "agentic", "reasoning")
_AGENTIC = re.compile(r"^Available tools:", re.M)
_REASONING = re.compile(r"\b(think|reason)\b[^.\n]{0,40}\bstep by step\b", re.I)

_CODE = re.compile(r"```|^\s*(def|class|return|import|for|if|while)\b.*[:({]\s*$|;\s*$", re.M)
_FENCED = re.compile(r"```.*?(```|$)", re.S)
_EDIT = re.compile(
    r"\b(edit|modify|refactor|rewrite|change|add|fix|update|replace|rename|convert|"
    r"remove|improve|optimi[sz]e|restructure|simplify)\b",
    re.I,
)
_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")
_MATH_WORDS = ("how many", "how much", "calculate", "solve", "total", "math", "percent", "sum of")
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "to",
    "vi",
    "be",
    "da",
    "fo",
    "gu",
    "ha",
    "ji",
    "ke",
    "la",
    "mo",
    "ni",
    "po",
    "se",
)
_NOVEL_BASE = 1 << 31  # prompt words hash into [2^31, 2^32); new tokens below 2^31
# a thinking model's markers around its thinking (Qwen3's <think> and </think>): counted as
# generated tokens, never streamed as text by a reasoning parser
THINK_START, THINK_END = 151667, 151668


def classify(text: str) -> str:
    """Which kind of request this reads as: code_edit (code with an instruction to change it,
    outside the code), summarization, math or chat. Code to complete (no edit instruction)
    reads as chat: its answer does not repeat the prompt. A prompt listing `Available tools:`
    at the start of a line reads as agentic work; one asking to think or reason step by step
    (AIME's, GPQA's, synthetic:reasoning's) as a reasoning problem."""
    if _AGENTIC.search(text):
        return "agentic"
    if _REASONING.search(text):
        return "reasoning"
    if _CODE.search(text) and _EDIT.search(_FENCED.sub(" ", text) if "```" in text else ""):
        return "code_edit"
    low = text.lower()
    if "summar" in low or "tl;dr" in low:
        return "summarization"
    if len(_NUMBER.findall(text)) >= 2 and any(w in low for w in _MATH_WORDS):
        return "math"
    return "chat"


def word_id(word: str) -> int:
    return _NOVEL_BASE | int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")


_IDS: dict[str, int] = {}  # word -> id: a workload's prompts come back cell after cell
_IDS_MAX = 1 << 20


def tokenize(text: str) -> tuple[list[str], list[int]]:
    words = text.split()
    ids, known = [], _IDS
    for w in words:
        i = known.get(w)
        if i is None:
            if len(known) >= _IDS_MAX:
                known.clear()
            i = known[w] = word_id(w)
        ids.append(i)
    return words, ids


def detokenize(ids) -> str:
    """Token ids as text: a prompt word's id as the word (when this process has seen it), any
    other id as the pseudo-word the model writes for it; one space before each, as streamed."""
    words = {}
    if any(i >= _NOVEL_BASE for i in ids):
        words = {v: k for k, v in _IDS.items()}
    return "".join(" " + (words.get(i) or novel_word(i)) for i in ids)


def novel_word(token: int) -> str:
    """The text of a newly generated token: a pseudo-word determined by its id."""
    n = 1 + token % 3
    return "".join(_SYLLABLES[(token >> (5 * i + 2)) % len(_SYLLABLES)] for i in range(n))


@dataclass(frozen=True)
class ContentParams:
    """How one kind of request's output is made. Stretches of new text have a geometric
    length with mean `novel_mean`; copied stretches are 3 + round(lognormal(copy_log_mu,
    copy_log_sigma)) tokens of the prompt, taken in order (`sequential`, as an edit rewrites
    code) or from anywhere. Inside new text, each token starts an echo with probability
    `echo_rate`: a 3-token phrase repeated from anywhere in the context, after which the text
    goes elsewhere (a prompt-lookup drafter matches it and is rejected). Natural output length:
    lognormal with mean `length_mean` and log-space sigma `length_sigma`."""

    novel_mean: float
    copy_log_mu: float
    copy_log_sigma: float
    length_mean: float
    echo_rate: float = 0.0
    length_sigma: float = 0.6
    sequential: bool = False
    # agentic work: the new text is the task's (drawn from its template, the prompt up to the
    # first blank line), each token replaced with probability template_vary; the copies are of
    # the request's own input (after the template)
    templated: bool = False
    template_vary: float = 0.0
    # thinking: copies come from the prompt and from what the model wrote so far (a chain of
    # thought restates and re-checks itself), not from the prompt only
    self_copy: bool = False


def rng_for(seed: int, text: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{seed}\0{text}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def natural_length(params: ContentParams, rng: np.random.Generator) -> int:
    mu = math.log(params.length_mean) - params.length_sigma**2 / 2
    return max(1, int(round(rng.lognormal(mu, params.length_sigma))))


def generate(
    prompt_ids: list[int], prompt_words: list[str], n: int, params: ContentParams, rng: np.random.Generator
) -> tuple[list[int], list[str]]:
    """`n` output tokens (ids and words)."""
    ids: list[int] = []
    words: list[str] = []
    p = len(prompt_ids)
    cursor = 0
    while len(ids) < n:
        stretch = int(rng.geometric(1.0 / params.novel_mean))
        echoes = rng.random(stretch) < params.echo_rate if params.echo_rate else None
        for j, tok in enumerate(rng.integers(1, _NOVEL_BASE, size=stretch).tolist()):
            if echoes is not None and echoes[j] and p + len(ids) >= 3:
                at = int(rng.integers(0, p + len(ids) - 2))
                for q in range(at, at + 3):  # a phrase from the prompt or the output so far
                    ids.append(prompt_ids[q] if q < p else ids[q - p])
                    words.append(prompt_words[q] if q < p else words[q - p])
            ids.append(tok)
            words.append(novel_word(tok))
        src = p + len(ids) if params.self_copy else p
        if src == 0:
            continue
        length = min(src, 3 + int(round(rng.lognormal(params.copy_log_mu, params.copy_log_sigma))))
        if params.self_copy:
            start = int(rng.integers(0, src - length + 1))
            for q in range(start, start + length):
                ids.append(prompt_ids[q] if q < p else ids[q - p])
                words.append(prompt_words[q] if q < p else words[q - p])
            continue
        if params.sequential:
            start = cursor if cursor + length <= p else 0
            cursor = start + length + int(rng.integers(0, 4))
        else:
            start = int(rng.integers(0, p - length + 1))
        ids.extend(prompt_ids[start : start + length])
        words.extend(prompt_words[start : start + length])
    return ids[:n], words[:n]


def template_of(text: str) -> str:
    """A templated request's template: its text up to the first blank line."""
    return text.split("\n\n", 1)[0]


def generate_templated(
    prompt_ids: list[int],
    prompt_words: list[str],
    template_words: int,
    n: int,
    params: ContentParams,
    template_rng: np.random.Generator,
    rng: np.random.Generator,
) -> tuple[list[int], list[str]]:
    """`n` output tokens of a templated request: the template's stretches (the same for every
    request of that template: `template_rng` draws only them), each token varied with
    probability template_vary, between copies from the request's input (`rng`)."""
    ids: list[int] = []
    words: list[str] = []
    src_ids = prompt_ids[template_words:] or prompt_ids
    src_words = prompt_words[template_words:] or prompt_words
    p = len(src_ids)
    while len(ids) < n:
        stretch = int(template_rng.geometric(1.0 / params.novel_mean))
        tokens = template_rng.integers(1, _NOVEL_BASE, size=stretch)
        vary = rng.random(stretch) < params.template_vary
        tokens[vary] = rng.integers(1, _NOVEL_BASE, size=int(vary.sum()))
        for tok in tokens.tolist():
            ids.append(tok)
            words.append(novel_word(tok))
        if p == 0:
            continue
        length = min(p, 3 + int(round(rng.lognormal(params.copy_log_mu, params.copy_log_sigma))))
        start = int(rng.integers(0, p - length + 1))
        ids.extend(src_ids[start : start + length])
        words.extend(src_words[start : start + length])
    return ids[:n], words[:n]


def chat_prompt(messages) -> str:
    """A chat request as the model reads it: each turn behind a role marker (one token each,
    as chat templates add tokens), then the assistant's turn."""
    parts = []
    for m in messages:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user') if isinstance(m, dict) else 'user'}|> {c or ''}")
    parts.append("<|assistant|>")
    return "\n".join(parts)


# a tool call's markers (Hermes' <tool_call> and </tool_call>, as Qwen3 writes them): generated
# tokens that a tool-call parser never streams as text
TOOL_START, TOOL_END = 151657, 151658
TOOL_MARKERS = 2  # every call has both; its name is one more token, the rest is arguments


def tool_call_length(rng: np.random.Generator) -> int:
    """Tokens of a tool call: the markers, the name and 2 + geometric (mean 10) argument tokens."""
    return TOOL_MARKERS + 1 + 2 + int(rng.geometric(0.1))


def tool_call(name: str, arg: str, n: int, rng: np.random.Generator) -> tuple[list[int], list[str]]:
    """A call of tool `name` in `n` tokens (at least the markers, the name and two argument
    tokens; fewer only when cut by max_tokens): arguments `{"ARG": "<words>"}`, one token per word."""
    k = max(2, n - TOOL_MARKERS - 1)
    values = rng.integers(1, _NOVEL_BASE, size=k - 1).tolist()
    args = [f'{{"{arg}":'] + [novel_word(t) for t in values]
    args[1] = '"' + args[1]
    args[-1] += '"}'
    ids = [TOOL_START, word_id(name), word_id(args[0]), *values, TOOL_END]
    words = ["<tool_call>", name, *args, "</tool_call>"]
    return ids[:n], words[:n]
