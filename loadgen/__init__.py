"""loadgen: a load tester for LLM serving with speculative decoding."""

from loadgen.allocators import choose_arrow_pool

choose_arrow_pool()  # before Arrow allocates anything (loadgen/allocators.py says why)

__version__ = "0.1.0"
