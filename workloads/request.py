"""The one request form every workload source produces."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload, independent of the endpoint it is sent to.

    Exactly one of `prompt` (plain text) and `messages` (chat turns, OpenAI form) is set.
    `sampling` holds sampling parameters passed through to the server as-is
    (`temperature`, `top_p`, `top_k`, `seed`, ...).
    """

    id: str
    prompt: str | None = None
    messages: tuple[Mapping[str, str], ...] | None = None
    max_tokens: int = 128
    min_tokens: int | None = None
    ignore_eos: bool = False
    sampling: Mapping[str, Any] = field(default_factory=dict)
    workload: str = ""
    category: str = ""

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError(f"request {self.id!r}: set exactly one of prompt and messages")
        if self.max_tokens < 1:
            raise ValueError(f"request {self.id!r}: max_tokens must be >= 1, got {self.max_tokens}")

    def as_messages(self) -> list[dict[str, str]]:
        """Chat form: a plain prompt becomes one user turn."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]
