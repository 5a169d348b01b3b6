"""The one request form every workload source produces."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload, independent of the endpoint it is sent to.

    `prompt` is sent to /v1/completions, `messages` (chat turns, OpenAI form) to
    /v1/chat/completions; a request has at least one (a plain prompt becomes one user turn).
    `sampling` holds sampling parameters passed through as-is (`temperature`, `top_p`, ...).
    `reference` is the data's expected answer, when it has one (for output-length policies and
    overlap analyses; never written to results). `sensitive` text (GPQA) must never be stored or
    logged: results keep ids and lengths only. A request with `followups` is the first turn of
    a conversation.
    """

    id: str
    prompt: str | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None
    max_tokens: int = 128
    min_tokens: int | None = None
    ignore_eos: bool = False
    sampling: Mapping[str, Any] = field(default_factory=dict)
    workload: str = ""
    category: str = ""
    turn: int = 0
    reference: str | None = field(default=None, repr=False)
    sensitive: bool = False
    # a conversation: the user's later turns, each sent with the whole history before it,
    # including the server's actual replies (loadgen.executors.conversation); `session` names
    # the conversation a turn belongs to
    followups: tuple[str, ...] = ()
    session: str = ""
    # tools the model may call (OpenAI's `tools`: {type: function, function: {name, description,
    # parameters}}), sent with every turn; after a turn whose reply called one, the next
    # followup is sent back as that call's result (a `tool` message), not as the user's
    tools: tuple[Mapping[str, Any], ...] | None = None

    def __post_init__(self) -> None:
        if self.prompt is None and self.messages is None:
            raise ValueError(f"request {self.id!r}: set a prompt or chat messages")
        if self.max_tokens < 1:
            raise ValueError(f"request {self.id!r}: max_tokens must be >= 1, got {self.max_tokens}")

    def __repr__(self) -> str:  # never show the text of a sensitive request
        if self.sensitive:
            return f"Request(id={self.id!r}, sensitive=True, max_tokens={self.max_tokens})"
        text = self.prompt if self.prompt is not None else str(self.messages)
        return f"Request(id={self.id!r}, prompt={text[:40]!r}..., max_tokens={self.max_tokens})"

    def as_messages(self) -> list[dict[str, str]]:
        """Chat form: the messages, or a plain prompt as one user turn."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

    def text(self) -> str:
        """All prompt text (for length statistics)."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(m.get("content") or "" for m in self.messages or ())
