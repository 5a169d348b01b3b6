"""A tiny Llama for vLLM's CPU build, served with random weights (`--load-format dummy`): its
config, a word-level tokenizer and a chat template, nothing else (no weights are written). Its
shapes are what vLLM's CPU attention serves (head size 64: 16 is refused, "Unsupported CPU
attention configuration"), small enough that a step is mostly vLLM's own overhead, so a server
is ready in under a minute on 2 cores.

Beside it, models of the same vocabulary for speculative decoding: `tiny-llama-draft`, a smaller
Llama (a draft model that is not the target), and `tiny-llama-eagle` / `tiny-llama-eagle3`, one-
layer heads in the shapes vLLM's EAGLE and EAGLE-3 take for this target.

Greedy by default (generation_config temperature 0): random weights have nothing to sample, a
greedy run repeats exactly, and a self-draft (the target as its own draft model, the same dummy
weights) accepts every draft, which makes acceptance a known quantity in tests.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 4096
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 4,
    "vocab_size": VOCAB,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
DRAFT = {
    **CONFIG,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
}
EAGLE = {**CONFIG, "num_hidden_layers": 1}  # vLLM names it EagleLlamaForCausalLM (method eagle)
EAGLE3 = {**CONFIG, "num_hidden_layers": 1, "draft_vocab_size": VOCAB}  # Eagle3LlamaForCausalLM
SPECIALS = {"<unk>": 0, "<s>": 1, "</s>": 2}
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
VERSION = 1  # of what is written: a change here remakes every cached copy


def write_tokenizer(where: Path) -> None:
    """Word-level: every whitespace-separated word one token (`w0` ... and the specials; a word
    not in the vocabulary is <unk>), so a prompt's token count is its word count and every token
    decodes to whole text (no partial UTF-8 for the detokenizer to hold back)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = dict(SPECIALS)
    while len(vocab) < VOCAB:
        vocab[f"w{len(vocab) - len(SPECIALS)}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(where / "tokenizer.json"))
    (where / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": CONFIG["max_position_embeddings"],
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )


def writer(config: dict):
    def build(where: Path) -> None:
        (where / "config.json").write_text(json.dumps(config, indent=1))
        (where / "generation_config.json").write_text(
            json.dumps({"bos_token_id": 1, "eos_token_id": 2, "temperature": 0.0}, indent=1)
        )
        write_tokenizer(where)

    return build


def check(where: Path, files: dict) -> None:
    """What vLLM reads of it loads: the config's shapes, and the tokenizer round-trips."""
    from tokenizers import Tokenizer

    from servers.localmodels.store import ModelError

    tok = Tokenizer.from_file(str(where / "tokenizer.json"))
    ids = tok.encode("w1 w2 w3").ids
    if ids != [1, 4, 5, 6] or tok.decode(ids[1:]) != "w1 w2 w3":
        raise ModelError(f"tiny-llama's tokenizer encodes 'w1 w2 w3' as {ids}, not [1, 4, 5, 6]")
    if json.loads((where / "config.json").read_text())["head_dim"] not in (32, 64, 128):
        raise ModelError("tiny-llama's head size is not one vLLM's CPU attention serves")
