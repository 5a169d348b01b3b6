"""What-if analysis from acceptance traces (docs/whatif.md): the trace form (`traces`), traces
from a measured run (`fromrun`), how speculation policies step through a request
(`policies`), their evaluation in virtual time over batch sizes (`evaluate`) and the results
as data and text (`report`)."""

BATCHES = (1, 8, 16, 32, 64, 128)  # the study's batch sizes: whatif's default
KS = (1, 3, 5)  # the study's fixed k: whatif's default
