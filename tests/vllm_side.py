"""Run by a Python that has vLLM installed (LOADGEN_VLLM_PYTHON; tests/test_vllm_side.py), never
imported by the suite: checks what loadgen and its emulator produce against vLLM's own code.

    python tests/vllm_side.py INPUT.json  ->  prints one JSON object

INPUT: {"responses": [{"model": "CompletionStreamResponse", "obj": {...}}, ...],
        "serve_lines": [["vllm", "serve", MODEL, FLAGS...] | {"argv": [...], "engine_config": true}, ...],
        "synthetic": [{"k": 3, "rates": [...] | null, "length": 2.5 | null}, ...],
        "models": [local model directory, ...],
        "adaptive": [{"draft_curve", "verify_curve", "max_num_reqs", "max_batch_tokens", "stale",
                      "now", "scheduled_drafts", "scheduled_tokens", "computed", "prefill_len"}, ...]}
OUTPUT: {"vllm": version, "responses": [error or null, ...], "serve_lines": [...],
         "synthetic": [rates or error, ...], "models": [error or null, ...],
         "adaptive": [{"draft", "verify", "budget", "tokens", "admitted"} or error, ...]}
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
            if "--speculative-config" in argv:  # every key a field of vLLM's config class, as it checks them
                _speculative_fields(args.speculative_config)
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


def _speculative_fields(cfg: dict) -> None:
    """The speculative config's keys are SpeculativeConfig's fields, and a k schedule passes
    vLLM's own validation (validate_and_normalize_dynamic_sd_schedule)."""
    import dataclasses

    from vllm.config.speculative import SpeculativeConfig

    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    unknown = sorted(set(cfg) - fields)
    if unknown:
        raise ValueError(f"speculative config keys vLLM's SpeculativeConfig does not have: {', '.join(unknown)}")
    if "num_speculative_tokens_per_batch_size" in cfg:
        from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

        validate_and_normalize_dynamic_sd_schedule(cfg["num_speculative_tokens_per_batch_size"])


def schedules(items: list[dict]) -> list:
    """vLLM's dense k-by-batch-size lookup (build_dynamic_sd_schedule_lookup) of each schedule."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    out: list[object] = []
    for item in items:
        try:
            out.append(build_dynamic_sd_schedule_lookup(item["schedule"], item["max_batch"], item["k"]))
        except ValueError as e:
            out.append(f"error: {e}")
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


def adaptive(items: list[dict]) -> list:
    """Adaptive verification as vLLM computes it (vllm/v1/worker/gpu/spec_decode/
    adaptive_verification.py): per item, the cost tables from the curves, the draft budget
    (AdaptiveVerificationManager.get_num_tokens) and the admitted drafts per request
    (AdaptiveVerificationManager.reallocate_drafts, vLLM's own handling of a budget of 0, of one
    that covers every draft and of one that binds), on a manager holding only what those two
    methods read, on CPU tensors; its torch.compile'd ranking replaced by the same function
    uncompiled (vLLM's `_assign_draft_token_budget`), which compiles nothing here."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    from vllm.v1.worker.gpu.spec_decode import adaptive_verification as av

    av._assign_draft_token_budget_compiled = av._assign_draft_token_budget
    out: list[object] = []
    for item in items:
        try:
            draft, verify = av.build_cost_tables_from_curves(
                [tuple(p) for p in item["draft_curve"]],
                [tuple(p) for p in item["verify_curve"]],
                item["max_num_reqs"],
                item["max_batch_tokens"],
            )
            stale, now = np.array(item["stale"], np.float32), np.array(item["now"], np.float32)
            n, k = stale.shape
            ids = [f"r{i}" for i in range(n)]
            mgr = object.__new__(av.AdaptiveVerificationManager)
            mgr.cost_tables = (draft, verify)
            mgr.num_speculative_steps = k
            mgr.num_bonus_tokens = 1
            mgr._max_total_logits = 1 << 30
            mgr._stale_idx = 0
            mgr._stale_confidences = [SimpleNamespace(np=stale)]
            mgr.req_states = SimpleNamespace(
                req_id_to_index={r: i for i, r in enumerate(ids)},
                num_computed_tokens_np=np.array(item["computed"], np.int64),
                prefill_len=SimpleNamespace(np=np.array(item["prefill_len"], np.int64)),
            )
            mgr._confidence_probs = torch.from_numpy(now)
            mgr._batch_draft_capacity = torch.empty(n, dtype=torch.int32)
            mgr.query_start_loc = torch.zeros(n + 1, dtype=torch.int32)
            mgr._num_non_draft_tokens = torch.empty(n, dtype=torch.int32)
            mgr._cu_num_logits = torch.empty(n + 1, dtype=torch.int32)
            scheduled = item["scheduled_drafts"]
            tokens = mgr.get_num_tokens(
                dict(zip(ids, item["scheduled_tokens"])), {r: [0] * d for r, d in zip(ids, scheduled) if d}
            )
            cu_logits, _, budget = mgr.reallocate_drafts(ids, torch.arange(n))
            admitted = (torch.diff(cu_logits) - mgr.num_bonus_tokens).tolist()
            out.append(
                {
                    "draft": draft.tolist(),
                    "verify": verify.tolist(),
                    "budget": budget,
                    "tokens": tokens,
                    "admitted": admitted,
                }
            )
        except Exception as e:  # noqa: BLE001
            out.append(f"error: {type(e).__name__}: {e}")
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
                "adaptive": adaptive(job.get("adaptive", [])),
                "schedules": schedules(job.get("schedules", [])),
            }
        )
    )


if __name__ == "__main__":
    main()
