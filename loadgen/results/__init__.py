"""Results, written and read in one place: files written atomically (`store.py`), a sweep's
cells and its table (`cells.py`) and manifest (`manifest.py`), a run's results rebuilt from its
journal (`recover.py`, `loadgen summarize`), a sweep's results read back for reports and
comparisons (`reading.py`), and what a finished run gives its caller (`outcome.py`)."""
