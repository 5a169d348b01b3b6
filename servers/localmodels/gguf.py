"""A GGUF read as transformers reads it (its GGUF loader needs `gguf` and `accelerate`): the
tokenizer and the model dequantized to float32, the first step of every recipe that writes a
GGUF's weights as a directory vLLM serves (gemma.py, qwen.py)."""

from __future__ import annotations

from pathlib import Path

from servers.localmodels.store import ModelError


def read(gguf: Path, who: str, install: str):
    """(tokenizer, float32 model) of `gguf`; ModelError naming what is missing and `install`."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelError(f"{who} is made with transformers and torch ({e.name} is missing); {install}") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except ImportError as e:  # transformers' GGUF loader names gguf or accelerate
        raise ModelError(f"transformers cannot read the GGUF ({e}); {install}") from None
    return tok, model
