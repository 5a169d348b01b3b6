"""What a run shows while it goes: each finished request appended to its journal (`journal.py`),
the console (`console.py`: progress bar, summary table, warnings) and the client's live
Prometheus metrics (`live.py`). Files written and read afterwards are loadgen.results'."""
