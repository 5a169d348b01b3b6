"""A measured run, above the execution backends: the server it runs against (`target.py`), the
one pipeline every measurement goes through (`measurement.py`: what `loadgen.api.run`, a sweep's
cell and a capacity probe do), and a run's job from its typed options (`options.py`). The load
itself is loadgen.load's; a run rebuilt from its journal is loadgen.results.recover's."""
