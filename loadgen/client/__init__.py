"""The streaming HTTP client for OpenAI-compatible completions and chat completions
(`stream.py`), its record of a request (`record.py`), and how bodies and events are made and read.
StreamClient and make_session load aiohttp when first asked for, so a record alone does not."""

from __future__ import annotations

__all__ = ["StreamClient", "make_session"]


def __getattr__(name: str):
    if name in __all__:
        from loadgen.client import stream

        return getattr(stream, name)
    raise AttributeError(f"module 'loadgen.client' has no attribute {name!r}")
