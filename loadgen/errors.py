"""The library's one error for people: a one-line message that names the input and the fix.
The CLI prints it as `loadgen: error: ...` and exits with `code` (2: bad input or a server that
cannot be reached or started; 1: nothing to report)."""
from __future__ import annotations


class LoadgenError(Exception):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
