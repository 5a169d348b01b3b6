"""A measured run: its spec and execution (`execute.py`: `RunSpec` -> `RunResult`), the server
it runs against (`target.py`), the server's /metrics window (`scrape.py`, `metric_names.py`), the
client's self-check (`selfcheck.py`), time dilation (`timescale.py`), and the whole of it end to
end (`measurement.py`: what `loadgen.api.run` does)."""
