"""The parts of vLLM's API that clients notice besides completions: `/tokenize` and
`/detokenize` (vLLM's TokenizeResponse / DetokenizeResponse shapes), and `logprobs` in a
completion's choices (the completions and the chat shapes, streamed or whole).

Log-probabilities are emulated: the emulated model has no distribution, so each token's value
is a deterministic function of its id (the same token, the same value), the chosen token is the
most likely, and the alternatives in `top_logprobs` are pseudo-words with lower values. They
have vLLM's shape and sizes, not a model's meaning.
"""

from __future__ import annotations

from servers.emulator.content import chat_prompt, detokenize, novel_word, tokenize

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs


class ParityError(ValueError):
    pass


def tokenize_response(body, max_model_len: int) -> dict:
    """POST /tokenize: {"prompt": str} or {"messages": [...]}, optional return_token_strs."""
    if not isinstance(body, dict):
        raise ParityError("request body must be a JSON object")
    if isinstance(body.get("messages"), list):
        text = chat_prompt(body["messages"])
    elif isinstance(body.get("prompt"), str):
        text = body["prompt"]
    else:
        raise ParityError("give prompt (a string) or messages (a list)")
    words, ids = tokenize(text)
    return {
        "count": len(ids),
        "max_model_len": max_model_len,
        "tokens": ids,
        "token_strs": words if body.get("return_token_strs") else None,
    }


def detokenize_response(body) -> dict:
    """POST /detokenize: {"tokens": [int, ...]} -> {"prompt": text}."""
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens
    ):
        raise ParityError("tokens must be a list of integers >= 0")
    return {"prompt": detokenize(tokens).lstrip(" ")}


def requested(body: dict, chat: bool) -> int | None:
    """How many top alternatives per token the request asks for (0: only the chosen token's),
    None for no logprobs; ParityError as vLLM refuses."""
    if chat:
        want, top = body.get("logprobs"), body.get("top_logprobs")
        if want is not None and not isinstance(want, bool):
            raise ParityError(f"logprobs must be a boolean, got {want!r}")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
            raise ParityError(f"top_logprobs must be an integer >= 0, got {top!r}")
        if top and not want:
            raise ParityError("when using `top_logprobs`, `logprobs` must be set to true.")
        n = (top or 0) if want else None
    else:
        n = body.get("logprobs")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ParityError(f"logprobs must be an integer >= 0, got {n!r}")
    if n is not None and n > MAX_LOGPROBS:
        raise ParityError(f"Requested sample logprobs of {n}, which is greater than max allowed: {MAX_LOGPROBS}")
    return n


def _value(token: int) -> float:
    return -round(0.01 + (token % 997) / 997 * 1.5, 4)


def _alternatives(token: int, n: int) -> list[tuple[str, float]]:
    base = _value(token)
    return [(" " + novel_word((token * 31 + j + 1) & 0x7FFFFFFF), round(base - 0.7 * (j + 1), 4)) for j in range(n)]


def block(tokens: list[int], words: list[str], top: int, chat: bool, offset: int = 0) -> dict:
    """The choice's `logprobs` for these tokens: chat's {"content": [...]} or completions'
    {"text_offset", "token_logprobs", "tokens", "top_logprobs"}; `offset`: characters of text
    before them."""
    texts = [" " + w for w in words]
    if chat:
        content = []
        for tok, text in zip(tokens, texts):
            lp = _value(tok)
            alts = [(text, lp), *_alternatives(tok, top - 1)] if top else []
            content.append(
                {
                    "token": text,
                    "logprob": lp,
                    "bytes": list(text.encode()),
                    "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in alts],
                }
            )
        return {"content": content}
    offsets, at = [], offset
    for text in texts:
        offsets.append(at)
        at += len(text)
    return {
        "text_offset": offsets,
        "token_logprobs": [_value(t) for t in tokens],
        "tokens": texts,
        "top_logprobs": [
            dict([(text, _value(tok)), *_alternatives(tok, top - 1)]) if top else {} for tok, text in zip(tokens, texts)
        ],
    }
