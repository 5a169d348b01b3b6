"""The streaming HTTP client for OpenAI-compatible completions and chat completions."""
from loadgen.client.stream import StreamClient

__all__ = ["StreamClient"]
