"""What clients notice besides completions, against the emulator as vLLM serves it: /tokenize
and /detokenize, logprobs from the `openai` SDK (streamed and whole, completions and chat), and
request bodies sent with `Transfer-Encoding: chunked`."""

from __future__ import annotations

import http.client
import json
import urllib.request
from urllib.parse import urlparse

import openai
import pytest

from servers.embedded import emulator_server

pytestmark = pytest.mark.servers

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def srv():
    with emulator_server(LLAMA, "--time-scale", "0.1") as s:
        yield s


def post(url: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_tokenize_counts_what_completions_count_and_detokenize_inverts_it(srv):
    prompt = "The quick brown fox jumps over the lazy dog"
    status, tok = post(srv.url, "/tokenize", {"model": LLAMA, "prompt": prompt, "return_token_strs": True})
    assert status == 200 and set(tok) == {"count", "max_model_len", "tokens", "token_strs"}
    assert tok["count"] == len(tok["tokens"]) == 9 and tok["token_strs"] == prompt.split()
    _, done = post(srv.url, "/v1/completions", {"model": LLAMA, "prompt": prompt, "max_tokens": 4})
    assert done["usage"]["prompt_tokens"] == tok["count"]
    _, chat = post(srv.url, "/tokenize", {"model": LLAMA, "messages": [{"role": "user", "content": prompt}]})
    _, done = post(
        srv.url,
        "/v1/chat/completions",
        {"model": LLAMA, "max_tokens": 4, "messages": [{"role": "user", "content": prompt}]},
    )
    assert done["usage"]["prompt_tokens"] == chat["count"]
    status, text = post(srv.url, "/detokenize", {"model": LLAMA, "tokens": tok["tokens"]})
    assert status == 200 and text == {"prompt": prompt}
    assert post(srv.url, "/detokenize", {"tokens": ["a"]})[0] == 400
    assert post(srv.url, "/tokenize", {"model": LLAMA})[0] == 400


def test_openai_sdk_gets_logprobs(srv):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    whole = client.completions.create(model=LLAMA, prompt="hello there", max_tokens=12, logprobs=3)
    lp = whole.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == whole.usage.completion_tokens == 12
    assert "".join(lp.tokens) == whole.choices[0].text
    assert all(len(t) == 3 and max(t.values()) == v for t, v in zip(lp.top_logprobs, lp.token_logprobs))
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(12)]
    again = client.completions.create(model=LLAMA, prompt="hello there", max_tokens=12, logprobs=3)
    assert again.choices[0].logprobs.token_logprobs == lp.token_logprobs  # deterministic

    chunks = list(
        client.chat.completions.create(
            model=LLAMA,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=10,
            logprobs=True,
            top_logprobs=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    content = [c for ch in chunks for choice in ch.choices if choice.logprobs for c in choice.logprobs.content]
    text = "".join(choice.delta.content or "" for ch in chunks for choice in ch.choices)
    assert len(content) == chunks[-1].usage.completion_tokens == 10
    assert "".join(c.token for c in content) == text
    assert all(len(c.top_logprobs) == 2 and c.top_logprobs[0].logprob == c.logprob for c in content)
    with pytest.raises(openai.BadRequestError, match="greater than max allowed: 20"):
        client.completions.create(model=LLAMA, prompt="x", max_tokens=2, logprobs=21)


def test_chunked_request_body_is_read(srv):
    u = urlparse(srv.url)
    body = json.dumps({"model": LLAMA, "prompt": "chunked request body here", "max_tokens": 3}).encode()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request(
        "POST",
        "/v1/completions",
        body=iter([body[:10], body[10:25], body[25:]]),
        headers={"Content-Type": "application/json"},
        encode_chunked=True,
    )
    r = conn.getresponse()
    out = json.loads(r.read())
    assert r.status == 200 and out["usage"] == {
        "prompt_tokens": 4,
        "total_tokens": 7,
        "completion_tokens": 3,
        "prompt_tokens_details": None,  # as vLLM: null where it has no details
        "completion_tokens_details": None,
    }
    # the connection stays usable for the next request (keep-alive after a chunked body)
    conn.request("POST", "/tokenize", body=iter([json.dumps({"prompt": "a b"}).encode()]), encode_chunked=True)
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["count"] == 2
    conn.close()
