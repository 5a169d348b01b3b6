"""What the client records about one request, as it happens (no derived figures here)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    """One request's raw measurements. Times are `time.monotonic_ns()` values.

    Per received chunk that carried tokens or text: its arrival time (`chunk_t_ns`, one
    timestamp per socket read, shared by the events in that read), the cumulative
    `completion_tokens` from the chunk's `usage` (`chunk_usage`, -1 when the chunk had none)
    and its text length in characters (`chunk_chars`). Token counts per chunk are resolved
    after the run (`loadgen.measures.tokens`).
    """

    index: int
    request_id: str
    warmup: bool
    t_scheduled_ns: int
    workload: str = ""
    category: str = ""
    max_tokens: int = 0
    queue_delay_ns: int = 0
    worker: int = 0  # which load-generating process sent it (loadgen.backends.worker_processes; 0 when one)
    session: str = ""  # the conversation it is a turn of ("" for a single request) ...
    turn: int = 0  # ... and which turn (1 = the first; 0 when the workload numbers none)
    t_session_send_ns: int = 0  # a later turn: when its conversation's first turn was sent
    t_call_ns: int = 0  # the client began sending (called the HTTP library)
    t_send_ns: int = 0  # the request's bytes were handed to the socket (t_call_ns if never)
    t_headers_ns: int = 0
    t_end_ns: int = 0
    # how much earlier than its timestamp the first chunk's bytes may have come: the client's
    # loop was busy that long before the select() that reported them (0: not known)
    read_delay_ns: int = 0
    status: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    done: bool = False
    # what the server reported of this request's speculative decoding, when it does (llama.cpp's
    # timings.draft_n / draft_n_accepted; vLLM's metrics.speculative_decoding)
    server_draft_tokens: int | None = None
    server_accepted_tokens: int | None = None
    server_spec_steps: int | None = None  # vLLM's num_spec_steps: verify steps that had drafts
    # vLLM's per_step_accepted (--per-request-spec-decode-metrics detailed): each verify step's
    # accepted drafts, in order
    server_step_accepted: list[int] | None = None
    chunk_t_ns: array = field(default_factory=lambda: array("q"))
    chunk_usage: array = field(default_factory=lambda: array("q"))
    chunk_chars: array = field(default_factory=lambda: array("q"))
    chunk_text: list[str] | None = None
    # a reasoning model's or a tool call's stream (loadgen/client/phases.py), else None: per chunk
    # its phase (0 answer, 1 reasoning, 2 tool call) and the server's cumulative
    # usage.completion_tokens_details.reasoning_tokens (-1 where it gave none)
    chunk_phase: array | None = None
    chunk_reasoning: array | None = None
    reasoning_tokens: int | None = None  # the server's last reasoning_tokens count
    # kept only with the text (a conversation's next turn sends them back), never journaled:
    # the answer's text without the thinking, and the tool calls as streamed
    answer_text: list[str] | None = None
    tool_calls: list[dict] | None = None
    # the token ids the server returned (vLLM's return_token_ids; `run --token-ids`), None
    # unless asked for (and never for a sensitive request)
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None

    @property
    def ok(self) -> bool:
        return self.error_type is None

    @property
    def lateness_ns(self) -> int:
        """How late the client sent it, beyond any intended wait for a concurrency slot
        (its own time to build and write the request included)."""
        return self.t_send_ns - self.t_scheduled_ns - self.queue_delay_ns


def fail(rec: RequestRecord, kind: str, message: str) -> None:
    """Record the request's first failure (docs/metrics.md, "Errors"); later ones are effects."""
    if rec.error_type is None:
        rec.error_type = kind
        rec.error_message = message[:500]


def timed_out(rec: RequestRecord, timeout_s: float) -> None:
    """The request's time limit passed: a failure unless the stream had ended ([DONE] came and
    the server did not close)."""
    if not rec.done:
        fail(rec, "timeout", f"no complete response within {timeout_s:g} s ({len(rec.chunk_t_ns)} chunks received)")


def ended(rec: RequestRecord, now_ns: int) -> RequestRecord:
    """The request is over (on either read path): its end time, and a stream that went well at
    the transport level but is not a whole answer recorded as the failure it is."""
    if not rec.t_end_ns:
        rec.t_end_ns = now_ns
    if rec.ok:
        if not rec.done:
            fail(rec, "missing_done", "stream ended without 'data: [DONE]'")
        elif not rec.chunk_t_ns:
            fail(rec, "empty_completion", "stream completed with no tokens")
    return rec


def request_id(rec: RequestRecord) -> bytes:
    """What the request is called on the wire (its X-Request-Id header): the run's index of it.
    vLLM takes the header as its request id (serving.py `_base_request_id`, with a suffix of its
    own), and the emulator names its step log's requests so (servers/emulator: --step-log), so
    a request in loadgen's frame (its `index`) is the one in the server's own record."""
    return b"loadgen-%d" % rec.index
