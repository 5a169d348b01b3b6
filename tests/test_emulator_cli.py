"""`loadgen-emulator serve`: bad configuration is one line; bad requests get vLLM's JSON
errors; falling behind its schedule is measured and said, never silent."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servers.embedded import emulator_server
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.servers

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servers.emulator", "serve", *args, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )


@pytest.mark.parametrize(
    "args,expect",
    [
        ([LLAMA, "--speculative-config", "{not json"], "not valid JSON"),
        (
            [LLAMA, "--speculative-config", '{"method": "medusa2", "num_speculative_tokens": 3}'],
            "unknown method 'medusa2'",
        ),
        (
            [LLAMA, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 0}'],
            "num_speculative_tokens must be a positive integer",
        ),
        (
            [LLAMA, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": -2}'],
            "num_speculative_tokens must be a positive integer",
        ),
        ([LLAMA, "--profile", "h100-gpt-5"], "unknown profile 'h100-gpt-5'"),
        (["some/unknown-model"], "no profile for model 'some/unknown-model'"),
        ([LLAMA, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'], "no mtp drafter"),
        ([LLAMA, "--max-num-seqs", "0"], "--max-num-seqs must be >= 1"),
        ([LLAMA, "--send-buffer", "0"], "--send-buffer must be at least 1 byte, got 0"),
        ([LLAMA, "--step-log", "/nonexistent/steps.jsonl"], "cannot write --step-log '/nonexistent/steps.jsonl'"),
        (
            [LLAMA, "--per-request-spec-decode-metrics", "summary"],  # vLLM's own refusal
            "--per-request-spec-decode-metrics requires speculative decoding to be enabled",
        ),
        (
            [
                LLAMA,
                "--speculative-config",
                '{"method": "eagle", "model": "d", "num_speculative_tokens": 3, '
                '"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.7, 0.1]}',
            ],
            "non-increasing",
        ),
        (
            [LLAMA, "--speculative-config", '{"method": "suffix", "suffix_decoding_max_tree_depth": 0}'],
            "must be an integer >= 1",
        ),
    ],
)
def test_bad_configuration_is_one_line(args, expect):
    res = serve(*args)
    assert res.returncode == 2
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and expect in err[0], res.stderr
    assert "Traceback" not in res.stderr


def post(url: str, path: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def emulator():
    with emulator_server(LLAMA, "--max-model-len", "4096") as srv:
        yield srv.url


@pytest.mark.parametrize(
    "path,body,status,expect",
    [
        ("/v1/completions", b"{oops", 400, "json_invalid"),
        ("/v1/completions", {"model": "other", "prompt": "hi"}, 404, "The model `other` does not exist."),
        ("/v1/completions", {"model": LLAMA}, 400, "prompt must be"),
        ("/v1/completions", {"model": LLAMA, "prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"model": LLAMA, "prompt": "hi", "temperature": -1}, 400, "temperature"),
        (
            "/v1/completions",
            {"model": LLAMA, "prompt": "hi", "stream_options": {"include_usage": True}},
            400,
            "Stream options can only be defined when `stream=True`.",
        ),
        (
            "/v1/completions",
            {"model": LLAMA, "prompt": "hi", "max_tokens": 5000},
            400,
            "maximum context length is 4096",
        ),
        ("/v1/chat/completions", {"model": LLAMA, "messages": "hi"}, 400, "messages must be"),
        (
            "/v1/chat/completions",
            {"model": LLAMA, "messages": [{"role": "user", "content": "hi"}], "n": 2},
            400,
            "n must be 1",
        ),
    ],
)
def test_bad_requests_get_openai_style_errors(emulator, path, body, status, expect):
    code, obj = post(emulator, path, body)
    assert code == status
    assert obj["error"]["code"] == status and expect in obj["error"]["message"]
    # vLLM: "Bad Request" for a body its request model refuses, else the error's class; the field
    # it is about in `param` (servers/conformance.py checks these against real vLLM)
    assert obj["error"]["type"] in ("BadRequestError", "NotFoundError", "Bad Request")
    assert obj["error"]["param"] is None or isinstance(obj["error"]["param"], str)


def test_a_whole_response_when_not_streaming(emulator):
    code, obj = post(
        emulator,
        "/v1/chat/completions",
        {"model": LLAMA, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 7, "ignore_eos": True},
    )
    assert code == 200 and obj["usage"]["completion_tokens"] == 7
    assert len(obj["choices"][0]["message"]["content"].split()) == 7


def _samples(text: str, name: str) -> list:
    return next(f for f in text_string_to_metric_families(text) if f.name == name).samples


def _value(text: str, name: str) -> float:
    return _samples(text, name)[0].value


def test_falling_behind_is_measured_and_warned(tmp_path):
    """At 1/100 of the modeled step time no Python loop keeps up: the time lost against the
    model, the slowdown and the lag must show in /metrics, in the log and in the run's summary."""
    with emulator_server(LLAMA, "--time-scale", "0.01") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--concurrency",
            "32",
            "--num-requests",
            "96",
            "--output-len",
            "64",
            "--quiet",
            "--output",
            str(tmp_path),
        )
        assert res.returncode == 0, res.stderr
        text = urllib.request.urlopen(srv.url + "/metrics").read().decode()
        log = open(srv.log).read()
    assert "behind its schedule" in log and "raise --time-scale" in log
    assert _value(text, "emulator:slowdown") > 2
    assert _value(text, "emulator:lost_seconds") > 0.1 * _value(text, "emulator:modeled_seconds")
    lag = _samples(text, "emulator:step_lag_seconds")
    assert next(s.value for s in lag if s.name.endswith("_count")) > 0
    emulator = json.loads((tmp_path / "summary.json").read_text())["server"]["emulator"]
    assert emulator["behind"] and emulator["delivered_of_model"] < 0.9


def test_keeping_up_is_not_warned(tmp_path):
    """A load far below what any machine holds once the emulated GPU runs 4x slower than its
    model: nothing lost, nothing warned."""
    with emulator_server(LLAMA, "--time-scale", "4") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--concurrency",
            "4",
            "--num-requests",
            "12",
            "--output-len",
            "32",
            "--quiet",
            "--output",
            str(tmp_path),
        )
        assert res.returncode == 0, res.stderr
        text = urllib.request.urlopen(srv.url + "/metrics").read().decode()
        log = open(srv.log).read()
    assert "behind its schedule" not in log
    assert _value(text, "emulator:lost_seconds") == 0 and _value(text, "emulator:modeled_seconds") > 0.2
    emulator = json.loads((tmp_path / "summary.json").read_text())["server"]["emulator"]
    assert not emulator["behind"] and emulator["delivered_of_model"] == 1.0


def _word_tokenizer(where) -> None:
    """A model directory of its own: a tokenizer whose tokens are runs of letters and runs of
    punctuation (`\\w+|[^\\w\\s]+`, unknown ones [UNK]) and a chat template that puts each turn
    behind its role marker."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "<|user|>": 1, "<|assistant|>": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(where / "tokenizer.json"))
    (where / "chat_template.jinja").write_text(
        "{% for m in messages %}<|{{ m.role }}|> {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )


def test_serve_tokenizer_counts_prompts_as_the_models_tokenizer_does(tmp_path):
    """`serve --tokenizer DIR`: usage.prompt_tokens is the model's own count (here, by hand: 12
    runs of letters or punctuation, and for a chat request the template's role markers, 3 each),
    not the emulator's 6 words; a directory without tokenizer.json is one line, exit 2."""
    _word_tokenizer(tmp_path)
    # alpha , beta - gamma delta ... epsilon zeta - eta theta: 12 tokens, 6 of the emulator's words
    prompt = "alpha, beta-gamma delta... epsilon zeta-eta theta"
    with emulator_server(LLAMA, "--tokenizer", str(tmp_path)) as srv:
        code, obj = post(srv.url, "/v1/completions", {"model": LLAMA, "prompt": prompt, "max_tokens": 4})
        assert code == 200 and obj["usage"]["prompt_tokens"] == 12, obj
        chat = {"model": LLAMA, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4}
        code, obj = post(srv.url, "/v1/chat/completions", chat)
        assert code == 200 and obj["usage"]["prompt_tokens"] == 12 + 3 + 3, obj  # <| user |> ... <| assistant |>
    with emulator_server(LLAMA) as srv:  # its own words: another count
        code, obj = post(srv.url, "/v1/completions", {"model": LLAMA, "prompt": prompt, "max_tokens": 4})
        assert code == 200 and obj["usage"]["prompt_tokens"] == 6, obj
    res = serve(LLAMA, "--tokenizer", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and "no tokenizer.json there" in res.stderr and "Traceback" not in res.stderr
