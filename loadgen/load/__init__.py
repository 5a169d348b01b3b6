"""The load itself, below the execution backends: one process sending a `RunSpec`'s requests
(`execute.py`: `RunSpec` -> `RunResult`), the server's /metrics window around it (`scrape.py`,
`metric_names.py`), the client's own event-loop lag (`looplag.py`), and time dilation
(`timescale.py`). Every backend (loadgen.backends) runs this; nothing here knows a backend."""
