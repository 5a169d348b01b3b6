"""The SSE splitter: events across reads, line endings, comments, and refusing what it can't read."""

import pytest

from loadgen.client.sse import SSEDecoder, StreamFault

pytestmark = pytest.mark.unit


def test_events_split_across_reads_and_joined_within_reads():
    d = SSEDecoder()
    assert d.feed(b'data: {"a":1}\n\ndata: {"b"') == [b'{"a":1}']
    assert d.feed(b":2}\n") == []
    assert d.feed(b"\ndata: [DONE]\n\n") == [b'{"b":2}', b"[DONE]"]
    assert d.flush() is None


def test_crlf_comments_fields_and_multiline_data():
    d = SSEDecoder()
    out = d.feed(b": keep-alive\r\n\r\nevent: message\r\nid: 7\r\ndata: x\r\ndata:y\r\n\r\n")
    assert out == [b"x\ny"]


def test_crlf_split_between_reads():
    d = SSEDecoder()
    assert d.feed(b"data: 1\r\n\r") == []
    assert d.feed(b"\ndata: 2\r\n\r\n") == [b"1", b"2"]


def test_unterminated_last_event_is_flushed():
    d = SSEDecoder()
    assert d.feed(b"data: [DONE]") == []
    assert d.flush() == b"[DONE]"


@pytest.mark.parametrize("line", [b"this is not sse", b"dta: {}", b'{"choices": []}'])
def test_malformed_lines_raise(line):
    with pytest.raises(StreamFault) as e:
        SSEDecoder().feed(line + b"\n\n")
    assert e.value.kind == "malformed_sse"
