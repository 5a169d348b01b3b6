"""Where results go: files written atomically (`store.py`), the console (`console.py`) and the
client's live Prometheus metrics (`live.py`)."""
