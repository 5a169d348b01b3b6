"""Prompt token counts as the real engine counts them: the model's own tokenizer (tokenizer.json)
and chat template (chat_template.jinja, or tokenizer_config.json's chat_template), rendered as
vLLM renders a chat request (transformers' apply_chat_template: a sandboxed Jinja environment,
trim_blocks and lstrip_blocks, add_generation_prompt) and encoded without special tokens; a
completion's prompt encoded with them (vLLM adds the tokenizer's BOS where it has one).

`serve --tokenizer DIR` (or `--tokenizer model`: the served model's own directory, a local model
loadgen wrote) makes the emulator count a request's prompt this way: its cost (prefill, KV) is
then the deployment's own prompts' as the real engine sees them, where the emulator's own words
count 3,822 tokens of a prompt Qwen2.5-Coder's tokenizer counts 8,002. The emulator's content
(what it generates, what n-gram matches in the prompt) is still its own words; the prompt's ids
are cut to, or padded with ids no word has up to, the model's count.
"""

from __future__ import annotations

import json
from pathlib import Path


class TokenizerError(ValueError):
    pass


class ModelTokens:
    def __init__(self, directory: str | Path) -> None:
        d = Path(directory).expanduser()
        if not (d / "tokenizer.json").is_file():
            raise TokenizerError(f"--tokenizer {directory}: no tokenizer.json there; give a model's directory")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerError("--tokenizer needs the tokenizers package (pip install tokenizers)") from None
        self.tokenizer = Tokenizer.from_file(str(d / "tokenizer.json"))
        config = {}
        if (d / "tokenizer_config.json").is_file():
            config = json.loads((d / "tokenizer_config.json").read_text())
        text = (
            (d / "chat_template.jinja").read_text()
            if (d / "chat_template.jinja").is_file()
            else config.get("chat_template")
        )
        self.specials = {k: _token(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        self.template = _compile(text) if isinstance(text, str) else None
        self.directory = d

    def count(self, *, prompt: str | None = None, messages: list | None = None, tools: list | None = None) -> int:
        """Tokens of a completion's `prompt`, or of a chat request's `messages` (and `tools`)
        rendered by the model's chat template with the assistant's turn opened."""
        if messages is None:
            return len(self.tokenizer.encode(prompt or "", add_special_tokens=True).ids)
        if self.template is None:
            raise TokenizerError(f"{self.directory}: the model has no chat template to count a chat request with")
        text = self.template.render(messages=messages, tools=tools or None, add_generation_prompt=True, **self.specials)
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def _token(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _compile(text: str):
    try:
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise TokenizerError("--tokenizer needs jinja2 for the model's chat template (pip install jinja2)") from None

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, **_: json.dumps(
        x, indent=indent, ensure_ascii=ensure_ascii
    )
    env.globals["raise_exception"] = raise_exception
    return env.from_string(text)


def fit(ids: list[int], words: list[str], count: int) -> tuple[list[int], list[str]]:
    """The emulator's prompt (`ids`, `words`) made `count` tokens long: cut, or padded with ids
    no word of the emulator's has (negative: nothing generated or looked up matches them)."""
    if len(ids) >= count:
        return ids[:count], words[:count]
    pad = count - len(ids)
    return ids + [-1 - i for i in range(pad)], words + [""] * pad
