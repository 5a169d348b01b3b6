"""The load from this process's event loop."""

from __future__ import annotations

import aiohttp

from loadgen.backends.base import Backend
from loadgen.load.execute import execute


class InProcess(Backend):
    name = "in-process"
    local = True

    def __init__(self, session: aiohttp.ClientSession | None = None) -> None:
        self.session = session  # e.g. the one that checked the server: its connection is reused

    async def execute(self, spec, requests, *, stop=None, on_progress=None, on_start=None, on_record=None):
        def record(rec) -> None:
            if on_record is not None:
                on_record(rec)
            if on_progress is not None:
                on_progress(1, int(not rec.ok))

        return await execute(spec, requests, session=self.session, stop=stop, on_record=record, on_start=on_start)
