"""The library's one error for people: a one-line message that names the input and the fix.
The CLI prints it as `loadgen: error: ...` and exits with `code` (2: bad input or a server that
cannot be reached or started; 1: nothing to report)."""

from __future__ import annotations


class LoadgenError(Exception):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def flagged(message: str, options: tuple[str, ...]) -> str:
    """Name the flag of a field's message: 'rate must be > 0' -> '--rate must be > 0', for the
    first of `options` (field names, longer ones first where one begins another) it starts with."""
    for word in options:
        if message.startswith(word + " "):
            return "--" + word.replace("_", "-") + message[len(word) :]
    return message
