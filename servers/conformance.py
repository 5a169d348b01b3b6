"""Conformance: the same requests to real vLLM and to the emulator, and every difference a
client could see (docs/emulator.md, "Conformance with real vLLM").

    python -m servers.conformance                      # tiny-llama-vllm-cpu's n-gram variant, both launched
    python -m servers.conformance --urls A B --model M --modes summary   # two servers already running

What is compared, per probe: the status code; the JSON's fields and their types (values only
where a client acts on them: finish reasons, token counts, error types and codes; in a stream,
how its cumulative usage counts tokens chunk by chunk, continuous usage included); a stream's
order of chunk kinds (role, content, finish, usage, [DONE]) and each kind's fields; /metrics'
vLLM families by name, type and label names. Text, ids and times differ by nature and are not
compared. Each difference is one line `probe | where | what`; its first two parts are the key
docs/emulator.md lists a known difference under.

Why a script of its own: a client sees the server only through these responses, and the
emulator is loadgen's stand-in for vLLM wherever vLLM cannot run; any difference here is one a
user's client code could trip on only in production.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import http.client
import json
import re
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from servers import engines

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"
CHAT = [{"role": "user", "content": PROMPT}]
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Probe:
    name: str
    path: str
    body: dict | bytes | None = None  # None: GET
    stream: bool = False
    values: tuple[str, ...] = ()  # fields whose values are compared too (dotted, [] for each item)
    modes: tuple[str, ...] = ("summary",)  # the per-request SD modes it runs in


def _chat(**kw) -> dict:
    return {"messages": CHAT, "max_tokens": 8, "ignore_eos": True, **kw}


def _completion(**kw) -> dict:
    return {"prompt": PROMPT, "max_tokens": 8, "ignore_eos": True, **kw}


# values a client acts on (prompt token counts differ by tokenizer: the emulator's is one word
# a token; completion tokens and finish reasons must not)
USAGE = ("usage.completion_tokens", "choices[].finish_reason", "metrics.speculative_decoding.num_spec_tokens")
ERROR = ("error.type", "error.code", "object", "type", "code")


def probes(model: str) -> list[Probe]:
    m = {"model": model}
    usage = {"stream_options": {"include_usage": True}}
    continuous = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    both = ("summary", "detailed")
    return [
        Probe("models", "/v1/models"),
        Probe("chat", "/v1/chat/completions", _chat(**m), values=USAGE, modes=both),
        Probe("chat-stream", "/v1/chat/completions", _chat(**m, stream=True), True, USAGE),
        Probe("chat-stream-usage", "/v1/chat/completions", _chat(**m, stream=True, **usage), True, USAGE, both),
        Probe("chat-stream-continuous", "/v1/chat/completions", _chat(**m, stream=True, **continuous), True, USAGE),
        Probe("completion", "/v1/completions", _completion(**m), values=USAGE, modes=both),
        Probe("completion-stream", "/v1/completions", _completion(**m, stream=True), True, USAGE),
        Probe("completion-stream-usage", "/v1/completions", _completion(**m, stream=True, **usage), True, USAGE, both),
        Probe(
            "completion-stream-continuous", "/v1/completions", _completion(**m, stream=True, **continuous), True, USAGE
        ),
        Probe("chat-logprobs", "/v1/chat/completions", _chat(**m, logprobs=True, top_logprobs=2), values=USAGE),
        Probe("completion-logprobs", "/v1/completions", _completion(**m, logprobs=2), values=USAGE),
        Probe(
            "chat-stream-logprobs", "/v1/chat/completions", _chat(**m, stream=True, logprobs=True, top_logprobs=2), True
        ),
        Probe("chat-n2", "/v1/chat/completions", _chat(**m, n=2), values=USAGE),  # greedy: vLLM refuses
        Probe("chat-n2-sampled", "/v1/chat/completions", _chat(**m, n=2, temperature=0.8), values=USAGE),
        Probe(
            "completion-stream-n2-sampled",
            "/v1/completions",
            _completion(**m, stream=True, n=2, temperature=0.8, **usage),
            True,
            USAGE,
        ),
        Probe("chat-stop", "/v1/chat/completions", _chat(**m, stop=["\n"], ignore_eos=False, max_tokens=32)),
        Probe("completion-max-tokens-1", "/v1/completions", _completion(**m, max_tokens=1), values=USAGE),
        Probe(
            "chat-stream-max-tokens-1",
            "/v1/chat/completions",
            _chat(**m, stream=True, max_tokens=1, **usage),
            True,
            USAGE,
        ),
        Probe("malformed-json", "/v1/chat/completions", b'{"model": ', values=ERROR),
        Probe("malformed-no-messages", "/v1/chat/completions", {**m, "max_tokens": 8}, values=ERROR),
        Probe("malformed-max-tokens", "/v1/completions", _completion(**m, max_tokens=-1), values=ERROR),
        Probe("malformed-temperature", "/v1/chat/completions", _chat(**m, temperature="hot"), values=ERROR),
        Probe(
            "malformed-stream-options",
            "/v1/completions",
            _completion(**m, stream_options={"include_usage": True}),
            values=ERROR,
        ),
        Probe("unknown-model", "/v1/chat/completions", _chat(model="no-such-model"), values=ERROR),
        Probe("tokenize", "/tokenize", {**m, "prompt": PROMPT}, values=("max_model_len",)),
    ]


@dataclass
class Seen:
    status: int
    shape: dict[str, set[str]] = field(default_factory=dict)  # path -> types
    values: dict[str, set[str]] = field(default_factory=dict)  # path -> values (the probe's `values`)
    kinds: list[str] = field(default_factory=list)  # a stream's chunk kinds, runs collapsed
    kind_shapes: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    error: str = ""  # an error's type and message, one line, when the answer is one


def _type(v) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "integer" if isinstance(v, int) else "number"
    )


# objects whose keys are data, not fields: a completion's top_logprobs maps each token's text
# to its logprob (the text differs by tokenizer)
KEYED_BY_DATA = ("choices[].logprobs.top_logprobs[]",)


def _walk(v, path: str, shape: dict[str, set[str]], values: dict[str, set[str]], want: tuple[str, ...]) -> None:
    shape.setdefault(path or ".", set()).add(_type(v))
    if path in want:
        values.setdefault(path, set()).add(json.dumps(v))
    if isinstance(v, dict):
        for k, x in v.items():
            k = "<text>" if path in KEYED_BY_DATA else k
            _walk(x, f"{path}.{k}" if path else k, shape, values, want)
    elif isinstance(v, list):
        for x in v:
            _walk(x, f"{path}[]", shape, values, want)


def _kind(event: dict) -> str:
    """What a chunk is to a client: role / content / finish / usage, joined with + when one
    chunk is several."""
    parts = []
    choices = event.get("choices") or []
    for c in choices:
        d = c.get("delta") or {}
        if d.get("role"):
            parts.append("role")
        # a token whose text is empty (vLLM's detokenizer holding back a partial character, or a
        # token without text) still makes a content chunk: what the text is differs by nature
        if "content" in d and not d.get("role") or "text" in c or d.get("reasoning") or d.get("tool_calls"):
            parts.append("content")
        if c.get("finish_reason"):
            parts.append("finish")
    if event.get("usage") and not choices:
        parts.append("usage")
    elif event.get("usage"):
        parts.append("with-usage")
    return "+".join(dict.fromkeys(parts)) or "empty"


def _counting(counts: list[tuple[str, int]]) -> str:
    """How a stream's cumulative usage.completion_tokens counts its tokens, chunk by chunk, as a
    client reads it (loadgen counts each chunk's tokens as the rise of this count): whether each
    chunk with text rises by at least one and any other stays put, where it ends, and whether a
    final usage-only chunk repeats the last count. The rises themselves (how many tokens each
    chunk carries) are the engine's steps: compared by the tests of each engine, not here."""
    last, rules = 0, set()
    for kind, n in counts:
        if n < last:
            rules.add("falls")
        elif "content" in kind and n == last:
            rules.add("a text chunk without a token")
        elif "content" not in kind and n != last and kind != "usage":
            rules.add(f"a {kind} chunk with tokens")
        last = n if kind != "usage" else last
    finals = [n for kind, n in counts if kind == "usage"]
    if len(finals) == len(counts):
        return f"final usage only: {finals[-1]}"
    end = f"ends at {last}" + (
        f", final usage {'=' if finals[-1] == last else '!='} the last chunk's" if finals else ""
    )
    return "per chunk: " + (", ".join(sorted(rules)) or "rises with every text chunk") + f"; {end}"


def request(url: str, p: Probe) -> Seen:
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=TIMEOUT_S)
    try:
        if p.body is None:
            conn.request("GET", p.path)
        else:
            raw = p.body if isinstance(p.body, bytes) else json.dumps(p.body).encode()
            conn.request("POST", p.path, raw, {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
    finally:
        conn.close()
    seen = Seen(r.status)
    if r.status != 200:
        try:
            err = json.loads(data).get("error") or {}
            seen.error = f"{err.get('type')}: {err.get('message')}".replace("\n", " ")[:200]
        except (ValueError, AttributeError):
            seen.error = data[:200].decode(errors="replace")
    if p.stream and r.status == 200:
        counts: list[tuple[str, int]] = []  # (kind, usage.completion_tokens) of each chunk with usage
        for block in data.decode().split("\n\n"):
            if not block.strip():
                continue
            payload = block.removeprefix("data: ").strip()
            if payload == "[DONE]":
                kind = "[DONE]"
            else:
                event = json.loads(payload)
                kind = _kind(event)
                if isinstance(n := (event.get("usage") or {}).get("completion_tokens"), int):
                    counts.append((kind, n))
                values: dict[str, set[str]] = {}
                _walk(event, "", seen.kind_shapes.setdefault(kind, {}), values, p.values)
                if kind in ("usage", "finish", "content+finish"):  # the end's values, not each chunk's
                    for path, v in values.items():
                        seen.values.setdefault(f"{kind}:{path}", set()).update(v)
            if not seen.kinds or seen.kinds[-1] != kind:
                seen.kinds.append(kind)
        if p.values and counts:
            seen.values["stream:usage.completion_tokens"] = {_counting(counts)}
        return seen
    try:
        body = json.loads(data)
    except ValueError:
        seen.shape["."] = {"not json"}
        return seen
    _walk(body, "", seen.shape, seen.values, p.values)
    return seen


def _shape_lines(where: str, a: dict[str, set[str]], b: dict[str, set[str]]) -> Iterator[tuple[str, str]]:
    for path in sorted(set(a) | set(b)):
        if path not in b:
            yield f"{where}{path}", "only vllm"
        elif path not in a:
            yield f"{where}{path}", "only emulator"
        elif a[path] != b[path]:
            yield f"{where}{path}", f"type vllm {'|'.join(sorted(a[path]))}, emulator {'|'.join(sorted(b[path]))}"


def compare(p: Probe, a: Seen, b: Seen) -> list[tuple[str, str]]:
    """(where, what) per difference between vLLM's answer `a` and the emulator's `b`."""
    out: list[tuple[str, str]] = []
    if a.status != b.status:  # one answer is an error: its fields differ from the other's by nature
        told = "; ".join(f"{who} {e}" for who, e in (("vllm", a.error), ("emulator", b.error)) if e)
        return [("status", f"vllm {a.status}, emulator {b.status}" + (f" ({told})" if told else ""))]
    out += _shape_lines("", a.shape, b.shape)
    if a.kinds != b.kinds:
        out.append(("chunks", f"vllm {' '.join(a.kinds)}; emulator {' '.join(b.kinds)}"))
    for kind in sorted(set(a.kind_shapes) & set(b.kind_shapes)):
        out += _shape_lines(f"{kind}:", a.kind_shapes[kind], b.kind_shapes[kind])
    for path in sorted(set(a.values) | set(b.values)):
        va, vb = a.values.get(path, set()), b.values.get(path, set())
        if va != vb and path in a.values and path in b.values:
            out.append((f"{path}=", f"vllm {', '.join(sorted(va))}; emulator {', '.join(sorted(vb))}"))
    return out


def metric_families(url: str) -> dict[str, tuple[str, frozenset[str]]]:
    """vLLM's families on /metrics: name -> (type, label names but engine and model_name)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=TIMEOUT_S)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        labels = {k for s in fam.samples for k in s.labels} - {"engine", "model_name", "le"}
        out[fam.name] = (fam.type, frozenset(labels))
    return out


def compare_metrics(a: dict, b: dict) -> list[tuple[str, str]]:
    out = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            out.append((name, "only vllm"))
        elif name not in a:
            out.append((name, "only emulator"))
        else:
            (ta, la), (tb, lb) = a[name], b[name]
            if ta != tb:
                out.append((name, f"type vllm {ta}, emulator {tb}"))
            if la != lb:
                out.append((name, f"labels vllm {','.join(sorted(la))}, emulator {','.join(sorted(lb))}"))
    return out


def run(vllm_url: str, emulator_url: str, model: str, mode: str) -> list[str]:
    """Every difference, one line each: `probe | where | what`."""
    lines = []
    for p in probes(model):
        if mode not in p.modes:
            continue
        for where, what in compare(p, request(vllm_url, p), request(emulator_url, p)):
            lines.append(f"{p.name} | {where} | {what}")
    if mode == "summary":
        for where, what in compare_metrics(metric_families(vllm_url), metric_families(emulator_url)):
            lines.append(f"metrics | {where} | {what}")
    return [line.replace("\n", " ") for line in lines]


def known(doc: Path) -> dict[str, str]:
    """docs/emulator.md's list of known differences: `probe | where` (shell patterns: `*`
    matches any text) -> the reason."""
    out, inside = {}, False
    for line in doc.read_text().splitlines():
        if line.startswith("## "):
            inside = line.startswith("## Conformance with real vLLM")
        elif inside and line.startswith("| `"):  # a row; `\|` is a | inside a cell
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            pattern = cells[0].strip("`")
            if pattern != "probe | where":  # the header
                out[pattern] = cells[-1]
    return out


def key(line: str) -> str:
    return " | ".join(line.split(" | ")[:2])


def explained(k: str, documented: dict[str, str]) -> str | None:
    """The reason docs/emulator.md gives for a difference's key (its first pattern that matches)."""
    return next((why for pattern, why in documented.items() if fnmatch.fnmatchcase(k, pattern)), None)


@contextmanager
def launched(deployment: str, variant: str, mode: str, log_dir: Path, profile: str) -> Iterator[tuple[str, str, str]]:
    """vLLM and the emulator, serving `deployment`'s `variant` with the per-request SD `mode`."""
    from servers.deployments import load, render
    from servers.launcher import Server, free_port

    dep = load(deployment)
    v = dep.variants[variant]
    args = tuple(("detailed" if a == "summary" else a) for a in v.args) if mode == "detailed" else v.args
    dep = dataclasses.replace(dep, variants={**dep.variants, variant: dataclasses.replace(v, args=args)})
    emu = dataclasses.replace(dep, engine=engines.emulator(), emulator_args=("--profile", profile))
    with ExitStack() as stack:
        real = stack.enter_context(Server(render(dep, variant, port=free_port()), log_dir / f"vllm-{mode}.log"))
        fake = stack.enter_context(Server(render(emu, variant, port=free_port()), log_dir / f"emulator-{mode}.log"))
        yield real.launch.url, fake.launch.url, dep.served_model_name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m servers.conformance", description=__doc__.split("\n\n")[0])
    ap.add_argument("--deployment", default="tiny-llama-vllm-cpu", help="a vLLM deployment of the catalog")
    ap.add_argument("--variant", default="ngram", help="its SD variant (with --per-request-spec-decode-metrics)")
    ap.add_argument("--profile", default="h100-llama-3.1-8b", help="the emulator's profile")
    ap.add_argument("--urls", nargs=2, metavar=("VLLM", "EMULATOR"), help="two servers already running")
    ap.add_argument("--model", help="with --urls: the served model name")
    ap.add_argument("--modes", default="summary,detailed", help="per-request SD modes to probe (one server pair each)")
    ap.add_argument("--doc", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "emulator.md")
    args = ap.parse_args(argv)
    if args.urls and not args.model:
        print("conformance: error: --urls needs --model (the served model name)", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    if bad := [m for m in modes if m not in ("summary", "detailed")]:
        print(f"conformance: error: --modes {','.join(bad)}: use summary and/or detailed", file=sys.stderr)
        return 2
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as logs:
        for mode in modes:
            if args.urls:
                lines += [f"[{mode}] {x}" for x in run(args.urls[0], args.urls[1], args.model, mode)]
                continue
            with launched(args.deployment, args.variant, mode, Path(logs), args.profile) as (a, b, model):
                lines += [f"[{mode}] {x}" for x in run(a, b, model, mode)]
    documented = known(args.doc) if args.doc.exists() else {}
    new = 0
    for line in lines:
        body = line.split("] ", 1)[1]
        reason = explained(key(body), documented)
        new += reason is None
        print(f"{line}  -- {'known: ' + reason if reason else 'NEW'}")
    print(f"{len(lines)} differences, {new} not listed in {args.doc.name}")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
