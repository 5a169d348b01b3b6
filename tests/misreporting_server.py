"""`python -m tests.misreporting_server`: a server in vLLM's dialect that streams every request the
same way, decode chunks of 3, 2 and 4 tokens after the prefill's one (finish length at 10
tokens), and reports for each a count the rule must refuse at k 3: 12 accepted drafts in 3 verify
steps (9 decode tokens in 3 steps accept 6, and the last step is full), in the per-request
`metrics.speculative_decoding` and in its counters, which have no per-position labels (so k can
only come from the speculative config the run declares). tests/test_reconcile_k.py measures it."""

from __future__ import annotations

import asyncio
import json

from servers.http import HttpConnection, HttpRequest, run_until_stopped, server_parser

CHUNKS = (1, 3, 2, 4)
ACCEPTED, STEPS, K = 12, 3, 3


class Misreporting:
    def __init__(self, model: str) -> None:
        self.model = model
        self.requests = 0

    def metrics(self) -> bytes:
        n = self.requests
        lines = {
            "vllm:generation_tokens_total": n * sum(CHUNKS),
            "vllm:prompt_tokens_total": n * 8,
            "vllm:spec_decode_num_drafts_total": n * STEPS,
            "vllm:spec_decode_num_draft_tokens_total": n * STEPS * K,
            "vllm:spec_decode_num_accepted_tokens_total": n * ACCEPTED,
        }
        text = "".join(f'# TYPE {k[:-6]} counter\n{k}{{model_name="{self.model}"}} {v}\n' for k, v in lines.items())
        return text.encode()

    async def handle(self, req: HttpRequest, conn: HttpConnection) -> None:
        if req.path == "/health":
            return conn.respond(200, b"")
        if req.path == "/metrics":
            return conn.respond(200, self.metrics(), "text/plain; version=0.0.4")
        if req.path == "/v1/models":
            entry = {"id": self.model, "object": "model", "owned_by": "vllm", "root": self.model}
            return conn.respond(200, json.dumps({"object": "list", "data": [entry]}).encode(), "application/json")
        if req.method != "POST" or req.path != "/v1/completions":
            return conn.respond(404, b'{"error": "completions only"}', "application/json")
        conn.start_stream()
        done = 0
        for j, n in enumerate(CHUNKS):
            done += n
            last = j == len(CHUNKS) - 1
            choice = {"index": 0, "text": " tok" * n, "finish_reason": "length" if last else None}
            usage = {"prompt_tokens": 8, "completion_tokens": done, "total_tokens": 8 + done}
            conn.write_chunk(
                b"data: "
                + json.dumps({"object": "text_completion", "choices": [choice], "usage": usage}).encode()
                + b"\n\n"
            )
            await asyncio.sleep(0.005)
        self.requests += 1  # counted as vLLM counts: when the request finishes
        sd = {"num_draft_tokens": STEPS * K, "num_accepted_draft_tokens": ACCEPTED, "num_spec_steps": STEPS}
        final = {"object": "text_completion", "choices": [], "usage": usage, "metrics": {"speculative_decoding": sd}}
        conn.write_chunk(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        conn.end_stream()


def main() -> None:
    args = server_parser("python -m tests.misreporting_server", __doc__, "misreporting").parse_args()
    run_until_stopped(Misreporting(args.model).handle, args.host, args.port, "python -m tests.misreporting_server")


if __name__ == "__main__":
    main()
