"""The streaming HTTP client for OpenAI-compatible completions and chat completions."""
from loadgen.client.stream import StreamClient, make_session

__all__ = ["StreamClient", "make_session"]
