"""Request bodies for the two OpenAI-compatible endpoints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from workloads import Request

ENDPOINTS = {"completions": "/completions", "chat": "/chat/completions"}


def stream_options(continuous_usage: bool) -> dict[str, bool]:
    """Ask for a final usage chunk, and (vLLM's extension) usage on every chunk, which makes
    the token count of every chunk exact."""
    asked = {"include_usage": True}
    if continuous_usage:
        asked["continuous_usage_stats"] = True
    return asked


def build_body(
    req: Request, *, endpoint: str, model: str, options: Mapping[str, bool], extra: Mapping[str, Any] | None = None
) -> bytes:
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        body["messages"] = req.as_messages()
        if req.tools:
            body["tools"] = [dict(t) for t in req.tools]
    elif req.prompt is not None:
        body["prompt"] = req.prompt
    else:
        raise ValueError(f"request {req.id!r} has chat messages only; use --endpoint chat")
    body["max_tokens"] = req.max_tokens
    body["stream"] = True
    body["stream_options"] = dict(options)
    if req.ignore_eos:
        body["ignore_eos"] = True
    if req.min_tokens is not None:
        body["min_tokens"] = req.min_tokens
    body.update(req.sampling)
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()
