"""Chunk interpretation: the usage fast path agrees with a full JSON parse, and neither lets a
broken or error event through."""

import json

import pytest

from loadgen.client.events import on_event
from loadgen.client.record import RequestRecord
from loadgen.client.sse import StreamFault
from servers.openai_stream import StreamRenderer

pytestmark = pytest.mark.unit


def _events(chat: bool, continuous: bool) -> list[bytes]:
    r = StreamRenderer(chat=chat, request_id="x", model="m", created=1, prompt_tokens=7, continuous_usage=continuous)
    ev = [r.role()] if chat else []
    ev += [
        r.chunk(' say "completion_tokens":99 \\n', 1, None),
        r.chunk(" b c", 3, None),
        r.chunk(" d", 4, "length"),
        r.final_usage(4),
    ]
    return [e[len(b"data: ") : -2] for e in ev] + [b"[DONE]"]


def _feed(payloads, keep_text=False) -> RequestRecord:
    rec = RequestRecord(0, "r", False, 0)
    if keep_text:
        rec.chunk_text = []  # forces the full parse, as a tokenizer run does
    for i, p in enumerate(payloads):
        on_event(rec, p, 1000 + i)
    return rec


@pytest.mark.parametrize("chat", [False, True])
def test_fast_path_matches_full_parse(chat):
    fast, full = _feed(_events(chat, True)), _feed(_events(chat, True), keep_text=True)
    for field in ("chunk_t_ns", "chunk_usage", "prompt_tokens", "usage_completion_tokens", "finish_reason", "done"):
        assert getattr(fast, field) == getattr(full, field), field
    assert list(fast.chunk_usage) == [1, 3, 4]  # the quoted text did not fool it
    assert fast.finish_reason == "length" and fast.prompt_tokens == 7


def test_without_continuous_usage_chunks_come_from_text():
    rec = _feed(_events(False, False))
    assert list(rec.chunk_usage) == [-1, -1, -1]
    assert rec.usage_completion_tokens == 4  # from the final usage chunk
    assert list(rec.chunk_chars)[1:] == [4, 2]


@pytest.mark.parametrize(
    "payload,kind",
    [
        (b'{"id":"x","choices":[{"text":"a"}],"usage":{"completion_tokens":3', "invalid_json"),
        (b'{"error":{"message":"engine died","code":500},"usage":{"completion_tokens":3}}', "stream_error"),
        (b'{"object":"error","message":"bad","code":400}', "stream_error"),
        (b"[1, 2]", "invalid_json"),
    ],
)
def test_broken_and_error_events_are_faults(payload, kind):
    with pytest.raises(StreamFault) as e:
        _feed([payload])
    assert e.value.kind == kind


def test_events_after_done_are_ignored():
    rec = _feed([b"[DONE]", json.dumps({"choices": [{"text": "late"}]}).encode()])
    assert rec.done and len(rec.chunk_t_ns) == 0


LLAMACPP = [  # llama.cpp's completions stream: one token per chunk, usage and timings on the last
    b'{"choices":[{"text":"def","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}',
    b'{"choices":[{"text":" f","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}',
    b'{"choices":[{"text":"():","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}',
    b'{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"object":"text_completion",'
    b'"usage":{"completion_tokens":3,"prompt_tokens":9,"total_tokens":12},'
    b'"timings":{"prompt_n":9,"predicted_n":3,"draft_n":4,"draft_n_accepted":1}}',
    b"[DONE]",
]


@pytest.mark.parametrize("keep_text", [False, True])
def test_a_final_usage_after_chunks_without_is_a_total_not_a_chunk(keep_text):
    rec = _feed(LLAMACPP, keep_text)
    assert len(rec.chunk_t_ns) == 3 and list(rec.chunk_chars) == [3, 2, 3]  # the text-less last is no token
    assert rec.usage_completion_tokens == 3 and rec.prompt_tokens == 9 and rec.finish_reason == "length"
    assert (rec.server_draft_tokens, rec.server_accepted_tokens) == (4, 1)


@pytest.mark.parametrize("chat", [False, True])
def test_returned_token_ids_are_kept_in_both_stream_forms(chat):
    """vLLM's return_token_ids: chat puts the prompt's ids at the top level of its first (role)
    event, completions on the first chunk's choice; every chunk's choice carries its own ids."""
    r = StreamRenderer(
        chat=chat,
        request_id="x",
        model="m",
        created=1,
        prompt_tokens=3,
        continuous_usage=True,
        prompt_token_ids=[7, 8, 9],
        return_token_ids=True,
    )
    ev = [r.role()] if chat else []
    ev += [
        r.chunk(" a", 1, None, [11]),
        r.chunk(" b c", 3, None, [12, 13]),
        r.chunk(" d", 4, "stop", [14]),
        r.final_usage(4),
    ]
    first = json.loads(ev[0][len(b"data: ") : -2])
    assert ("prompt_token_ids" in first) == chat and ("prompt_token_ids" in first["choices"][0]) == (not chat)
    rec = RequestRecord(0, "r", False, 0)
    rec.token_ids = []  # asked for (run --token-ids)
    for i, p in enumerate([e[len(b"data: ") : -2] for e in ev] + [b"[DONE]"]):
        on_event(rec, p, 1000 + i)
    assert rec.prompt_token_ids == [7, 8, 9] and rec.token_ids == [11, 12, 13, 14]
    assert list(rec.chunk_usage) == [1, 3, 4]  # counting is unchanged
    plain = _feed([e[len(b"data: ") : -2] for e in ev] + [b"[DONE]"])
    assert plain.token_ids is None and plain.prompt_token_ids is None  # not asked for: not kept
