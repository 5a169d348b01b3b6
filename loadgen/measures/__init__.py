"""From records to figures: tokens per chunk (`tokens.py`), engine steps (`steps.py`), the
request frame (`frame.py`: one row per request), the summary (`summary.py`, every figure of
docs/metrics.md, with `describe.py`'s distribution summaries), the client's self-check
(`selfcheck.py`: is the client the bottleneck?), and the SLO language for goodput and gates
(`slo.py`)."""
