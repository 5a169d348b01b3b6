"""Run by a Python that has vLLM installed (LOADGEN_VLLM_PYTHON; tests/test_vllm_side.py), never
imported by the suite: checks what loadgen and its emulator produce against vLLM's own code.

    python tests/vllm_side.py INPUT.json  ->  prints one JSON object

INPUT: {"responses": [{"model": "CompletionStreamResponse", "obj": {...}}, ...],
        "serve_lines": [["vllm", "serve", MODEL, FLAGS...] | {"argv": [...], "engine_config": true}, ...],
        "synthetic": [{"k": 3, "rates": [...] | null, "length": 2.5 | null}, ...],
        "models": [local model directory, ...]}
OUTPUT: {"vllm": version, "responses": [error or null, ...], "serve_lines": [...],
         "synthetic": [rates or error, ...], "models": [error or null, ...]}
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def _extras(model, where: str) -> list[str]:
    """Fields a pydantic model kept as extras (vLLM's models allow them, so validation alone
    would not notice a misspelt field), recursively."""
    from pydantic import BaseModel

    out = [f"{where}.{k}" for k in (model.model_extra or {})]
    for name in type(model).model_fields:
        v = getattr(model, name)
        items = v if isinstance(v, list) else [v]
        for i, item in enumerate(items):
            if isinstance(item, BaseModel):
                out += _extras(item, f"{where}.{name}" + (f"[{i}]" if isinstance(v, list) else ""))
    return out


def responses(items: list[dict]) -> list[str | None]:
    from vllm.entrypoints.openai.chat_completion import protocol as chat
    from vllm.entrypoints.openai.completion import protocol as completion

    models = {
        name: getattr(chat, name, None) or getattr(completion, name)
        for name in (
            "CompletionResponse",
            "CompletionStreamResponse",
            "ChatCompletionResponse",
            "ChatCompletionStreamResponse",
        )
    }
    out: list[str | None] = []
    for item in items:
        try:
            m = models[item["model"]].model_validate(item["obj"])
            extras = _extras(m, item["model"])
            if extras:
                raise ValueError(f"fields vLLM's model does not have: {', '.join(extras)}")
            sd = item["obj"].get("metrics", {}).get("speculative_decoding")
            sd = None if sd is None else {k: v for k, v in sd.items() if v is not None}  # null = absent
            if sd is not None and m.metrics.speculative_decoding.model_dump(exclude_none=True) != sd:
                raise ValueError("metrics.speculative_decoding does not survive vLLM's model unchanged")
            out.append(None)
        except Exception as e:  # noqa: BLE001 - reported back, one line
            out.append(f"{type(e).__name__}: {e}".splitlines()[0][:400])
    return out


def serve_lines(lines: list[list[str]]) -> list[str | None]:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    out: list[str | None] = []
    for item in lines:
        argv, full = (item["argv"], item.get("engine_config")) if isinstance(item, dict) else (item, False)
        try:
            if argv[:2] != ["vllm", "serve"]:
                raise ValueError(f"not a vllm serve line: {argv[:2]}")
            args = parser.parse_args(argv[1:])
            if "--speculative-config" in argv and not isinstance(args.speculative_config, dict):
                raise ValueError("--speculative-config did not parse into a dict")
            if full:  # a local model: vLLM builds its whole engine config (every check it makes)
                from vllm.engine.arg_utils import EngineArgs

                args.model = args.model_tag
                EngineArgs.from_cli_args(args).create_engine_config()
            out.append(None)
        except SystemExit as e:
            out.append(f"argparse exit {e.code}")
        except Exception as e:  # noqa: BLE001
            out.append(f"{type(e).__name__}: {e}".splitlines()[0][:400])
    return out


def models(paths: list[str]) -> list[str | None]:
    """A local model directory's config and tokenizer load as vLLM loads them (no download)."""
    out: list[str | None] = []
    for path in paths:
        try:
            from transformers import AutoConfig
            from vllm.tokenizers import get_tokenizer

            config = AutoConfig.from_pretrained(path, local_files_only=True)
            tok = get_tokenizer(path)
            ids = tok.encode("the quick and the dead", add_special_tokens=False)
            if len(ids) != 5 or config.vocab_size != 128256:
                raise ValueError(f"{len(ids)} tokens for 5 words, vocab {config.vocab_size}")
            tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
            out.append(None)
        except Exception as e:  # noqa: BLE001
            out.append(f"{type(e).__name__}: {e}".splitlines()[0][:400])
    return out


def synthetic(items: list[dict]) -> list:
    from vllm.config.speculative import SpeculativeConfig

    out: list[object] = []
    for item in items:
        try:
            out.append(SpeculativeConfig._resolve_synthetic_acceptance_rates(item["k"], item["rates"], item["length"]))
        except ValueError as e:
            out.append(f"error: {e}")
    return out


def main() -> None:
    with open(sys.argv[1]) as f:
        job = json.load(f)
    import vllm

    print(
        json.dumps(
            {
                "vllm": vllm.__version__,
                "responses": responses(job.get("responses", [])),
                "serve_lines": serve_lines(job.get("serve_lines", [])),
                "synthetic": synthetic(job.get("synthetic", [])),
                "models": models(job.get("models", [])),
            }
        )
    )


if __name__ == "__main__":
    main()
