"""What a reasoning parser and a tool-call parser make of the emulated model's output, as vLLM
streams it (vLLM 0.32: `DeltaMessage` with `content`, `reasoning` and `tool_calls`; usage with
`completion_tokens_details.reasoning_tokens` whenever a reasoning parser is set).

The model's output is laid out by the engine: a thinking model's `<think>`, its thought and
`</think>` first (`Sequence.reasoning_end` tokens), then the answer: text, or a tool call
(`<tool_call>`, the tool's name, its arguments, `</tool_call>`). Markers are generated tokens
(counted in `completion_tokens`) that no parser streams as text. An engine step's tokens become
one delta; a step whose tokens are all markers streams nothing, as vLLM skips a chunk whose
delta the parser holds back (unless it is the last).
"""

from __future__ import annotations

import hashlib
import uuid

from servers.emulator.content import TOOL_END

# vLLM 0.32's registered parsers (vllm/reasoning/__init__.py, vllm/tool_parsers/__init__.py):
# the names the emulator accepts, as vLLM refuses any other
REASONING_PARSERS = (
    "cohere_command3",
    "cohere_command4",
    "deepseek_r1",
    "deepseek_v3",
    "deepseek_v4",
    "deepseek_v41",
    "ernie45",
    "gemma4",
    "glm45",
    "glm47",
    "granite",
    "granite_thinking_parser",
    "hf",
    "holo2",
    "hunyuan_a13b",
    "hy_v3",
    "hy_v4",
    "inkling",
    "k2_horizon",
    "kimi_k2",
    "kimi_k3",
    "ling3",
    "mimo",
    "minicpmv",
    "minimax_m2",
    "minimax_m2_append_think",
    "minimax_m3",
    "mistral",
    "muse_glimmer",
    "nemotron_v3",
    "olmo3",
    "openai_gptoss",
    "plamo3",
    "poolside_v1",
    "qwen3",
    "seed_oss",
    "step3",
    "step3p5",
)
TOOL_PARSERS = (
    "apertus",
    "cohere_command3",
    "cohere_command4",
    "deepseek_v3",
    "deepseek_v31",
    "deepseek_v32",
    "deepseek_v4",
    "deepseek_v41",
    "dots",
    "ernie45",
    "functiongemma",
    "gemma4",
    "gigachat3",
    "glm45",
    "glm47",
    "granite",
    "granite4",
    "hermes",
    "hf",
    "hunyuan_a13b",
    "hy_v3",
    "hy_v4",
    "inkling",
    "internlm",
    "jamba",
    "k2_horizon",
    "kimi_k2",
    "kimi_k3",
    "lfm2",
    "ling3",
    "llama3_json",
    "llama4_json",
    "llama4_pythonic",
    "longcat",
    "mimo",
    "minicpm5",
    "minimax_m2",
    "minimax_m3",
    "mistral",
    "muse_glimmer",
    "olmo3",
    "openai",
    "phi4_mini_json",
    "plamo3",
    "poolside_v1",
    "pythonic",
    "qwen3_coder",
    "qwen3_json",
    "qwen3_xml",
    "seed_oss",
    "step3",
    "step3p5",
    "xlam",
)

ANSWER, REASONING, TOOL = 0, 1, 2  # a chunk's phase (the emulator's --chunk-log)


class ChatError(ValueError):
    pass


def check_parsers(reasoning_parser: str | None, tool_call_parser: str | None, auto_tools: bool) -> None:
    """The serving flags as vLLM checks them (ChatError in its words)."""
    if reasoning_parser is not None and reasoning_parser not in REASONING_PARSERS:
        raise ChatError(f"invalid reasoning parser: {reasoning_parser} (choose from {', '.join(REASONING_PARSERS)})")
    if tool_call_parser is not None and tool_call_parser not in TOOL_PARSERS:
        raise ChatError(f"invalid tool call parser: {tool_call_parser} (choose from {', '.join(TOOL_PARSERS)})")
    if auto_tools and tool_call_parser is None:
        raise ChatError("--enable-auto-tool-choice requires --tool-call-parser to be set")


def thinks(body: dict, reasoning: bool) -> bool:
    """Whether the model thinks before answering this chat request: served with a reasoning
    parser, unless the request turns thinking off (`chat_template_kwargs.enable_thinking`
    false, or `reasoning_effort` "none", as vLLM maps it)."""
    if not reasoning:
        return False
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
        return False
    return body.get("reasoning_effort") != "none"


def thinking_budget(body: dict) -> int | None:
    v = body.get("thinking_token_budget")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ChatError(f"thinking_token_budget must be an integer >= 0, got {v!r}")
    return v


def tool_choice(body: dict, auto_tools: bool) -> tuple[str, str, str] | None:
    """The tool the emulated model calls for this request (name, argument, call id), or None
    when it answers in text. With tools and tool_choice auto (the default when tools are
    given), it calls one after the user speaks and after each tool result, up to two results
    since the user's last message, then answers (in text too when the server was started
    without --enable-auto-tool-choice, as vLLM 0.32 answers); "required" or a named tool:
    always; "none": never. Which tool: drawn from the conversation so far."""
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools
    ):
        raise ChatError("tools must be a list of {type: function, function: {name, parameters}} objects")
    if not tools:  # vLLM 0.32's check, in its words
        raise ChatError(
            "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely."
        )
    choice = body.get("tool_choice", "auto")
    if choice == "none" or (choice == "auto" and not auto_tools):
        return None  # vLLM 0.32 without --enable-auto-tool-choice: the model answers in text
    messages = body.get("messages") or []
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        fn = next((t["function"] for t in tools if t["function"].get("name") == name), None)
        if fn is None:
            raise ChatError(f"tool_choice names {name!r}, which is not among the tools")
    elif choice in ("auto", "required"):
        results = 0
        for m in reversed(messages):
            if not isinstance(m, dict) or m.get("role") == "user":
                break
            results += m.get("role") == "tool"
        if choice == "auto" and results >= 2:
            return None
        said = [(m.get("role"), m.get("content")) for m in messages if isinstance(m, dict)]  # not the calls' ids
        seed = hashlib.blake2b(repr(said).encode(), digest_size=4).digest()
        fn = tools[int.from_bytes(seed, "little") % len(tools)]["function"]
    else:
        raise ChatError(f'tool_choice must be "none", "auto", "required" or a named tool, got {choice!r}')
    props = (fn.get("parameters") or {}).get("properties") or {}
    arg = next(iter(props), "input")
    return str(fn.get("name") or "tool"), str(arg), f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"


def tools_text(body: dict) -> str:
    """The tools as a chat template puts them before the conversation (the model reads them)."""
    tools = body.get("tools")
    if not tools:
        return ""
    names = " ".join(str(t["function"].get("name")) for t in tools)
    return f"<|tools|> {names}\n"


def delta(seq, start: int, words: list[str], tokens: list[int]) -> tuple[dict, int | None]:
    """The delta of one engine step's tokens (output positions start..), and its phase: the
    reasoning parser's `reasoning` (thinking, markers hidden), `content` (the answer), or
    `tool_calls` (a call's name on the first delta that has it, then its arguments); the phase
    is None when nothing in it is visible (markers only)."""
    end = seq.reasoning_end
    reasoning, content, args = [], [], []
    name = None
    for i, w in enumerate(words):
        pos = start + i
        if pos < end:
            if 0 < pos < end - 1:
                reasoning.append(" " + w)
        elif seq.tool_call is not None:
            j = pos - end  # 0: <tool_call>, 1: the name, then arguments, </tool_call>
            if j == 1:
                name = w
            elif j >= 2 and tokens[i] != TOOL_END:
                args.append(w if j == 2 else " " + w)
        else:
            content.append(" " + w)
    out: dict = {}
    phase = REASONING if reasoning else None
    if content:
        out["content"] = "".join(content)
        phase = ANSWER
    if reasoning:
        out["reasoning"] = "".join(reasoning)
    if name is not None or args:
        call: dict = {"index": 0}
        if name is not None:
            call.update(id=seq.tool_call[1], type="function")
        call["function"] = {"arguments": "".join(args)} if name is None else {"name": name, "arguments": "".join(args)}
        out["tool_calls"] = [call]
        phase = TOOL
    return out, phase


def message(seq) -> dict:
    """The whole response's message: the answer, the thinking, the tool call."""
    d, _ = delta(seq, 0, seq.words[: seq.emitted], seq.output[: seq.emitted])
    msg: dict = {"role": "assistant", "content": d.get("content")}
    if "reasoning" in d:
        msg["reasoning"] = d["reasoning"]
    if "tool_calls" in d:
        msg["tool_calls"] = [{**d["tool_calls"][0], "type": "function"}]
    return msg
