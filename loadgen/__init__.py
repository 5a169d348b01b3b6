"""loadgen: a load tester for LLM serving with speculative decoding."""

import os

# Arrow's system allocator, chosen before Arrow first allocates (unless the user chose one):
# its default pool keeps what it frees, and a run's end grew with the run's length by it
# (loadgen/results/allocators.py)
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

__version__ = "0.1.0"
