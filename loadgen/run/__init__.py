"""A measured run, above the execution backends: the server it runs against (`target.py`), the
load on the backend the job asks for, the figures (`measurement.py`: what `loadgen.api.run`
does), and a run's results from its journal (`recover.py`, `loadgen summarize`). The load itself
is loadgen.load's."""
