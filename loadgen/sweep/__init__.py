"""`loadgen sweep`: a plan's cells placed and run (the plan itself is loadgen.planning's, the
files loadgen.results'): the sweep as a job (`job.py`), one server per variant and its cells in
order (`slots.py`), slots side by side (`parallel.py`, `worker.py`) or as Ray tasks
(`cluster.py`), a cell as a measured run (`cell.py`) or simulated (`simulated.py`), progress
(`progress.py`)."""
