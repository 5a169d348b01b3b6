"""What a person reads while and after a run: the progress bar, the summary table and its
warnings."""

from __future__ import annotations

import sys

from loadgen.config import sampling_label
from loadgen.shapes import label_of

_ROWS = (
    ("TTFT", "ttft_ms"),
    ("TTFT from scheduled", "ttft_from_scheduled_ms"),
    ("TPOT", "tpot_ms"),
    ("ITL (per token)", "itl_ms"),
    ("Inter-chunk latency", "inter_chunk_ms"),
    ("E2E latency", "e2e_ms"),
    ("E2E from scheduled", "e2e_from_scheduled_ms"),
    ("Queue delay", "queue_delay_ms"),
)
_COLS = ("mean", "p50", "p90", "p99", "p99.9")


# a reasoning model's run: its phases under the usual rows (docs/metrics.md)
_PHASE_ROWS = (
    ("TTFR (first thinking)", "ttfr_ms"),
    ("TTFO (first answer)", "ttfo_ms"),
    ("TT first tool call", "ttftc_ms"),
    ("TPOT thinking", "tpot_reasoning_ms"),
    ("TPOT answering", "tpot_answer_ms"),
)


NA = "n/a"  # a figure the server does not report (SGLang counts no draft tokens; a server may have no metrics)


def _f(x, fmt: str = ".2f", missing: str = "-") -> str:
    """A figure, or `missing` where there is none (NA for a server's figure it does not report)."""
    return missing if x is None else format(x, fmt)


def _load(cfg: dict) -> str:
    return label_of(cfg["load"])


def render(summary: dict) -> str:
    lines = _header(summary) + _server(summary) + _workload(summary) + [""] + _table(summary)
    if summary["errors"]:
        lines.append("")
        lines.append("Errors: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["errors"].items())))
    return "\n".join(lines)


def _header(summary: dict) -> list[str]:
    """What ran, its sampling and time scale, its throughput window and steady state."""
    cfg = summary["config"]
    lines = [
        f"{summary['completed']} completed, {summary['failed']} failed"
        + (f", {summary['cancelled']} cancelled" if summary["cancelled"] else "")
        + f" in {summary['duration_s']:.1f} s  ({_load(cfg)}; model {cfg['model']} at {cfg['base_url']})"
    ]
    if cfg.get("sampling"):
        lines.append(f"Sampling: {sampling_label(cfg['sampling'])}")
    scale = summary.get("time_scale") or 1.0
    if scale != 1.0:
        lines.append(
            f"Time scale {scale:g}: the emulated GPU ran {scale:g}x slower than its model; every figure "
            "below is converted back into its own (emulated) time"
        )
    win = summary.get("window")
    if win:
        note = {"steady": "", "steady_state": " (--steady-state)"}.get(win["kind"], ", no steady state: whole run")
        lines.append(
            f"Throughput over {win['duration_s']:.1f} s window{note}: "
            f"{summary['output_throughput_tok_s']:.1f} output tok/s, "
            f"{summary['total_throughput_tok_s']:.1f} total tok/s, "
            f"{summary['request_throughput_req_s']:.2f} req/s"
        )
    st = summary.get("steady_state")
    if st:
        lines.append(
            f"Steady state: {st['requests']} requests count"
            + (
                f", sent from {st['start_s']:.1f} s and done by {st['end_s']:.1f} s ({st['left_out_ramp']} left out "
                f"in the ramp-up, {st['left_out_drain']} in the drain)"
                if st["found"]
                else f"; {st['note']}"
            )
        )
    lines.append(
        f"Tokens per decode chunk: {_f(summary['tokens_per_chunk_mean'])} mean; "
        f"token counts from {summary['token_count_source']}"
    )
    return lines


def _sd_counts(sd: dict) -> str:
    """The server's SD window figures in one line, each "n/a" where its dialect has no counter
    for it (docs/metrics.md, "Speculative decoding")."""
    positions = sd.get("per_position")
    return (
        f"acceptance rate {_f(sd.get('acceptance_rate'), '.3f', NA)}, "
        f"mean acceptance length {_f(sd.get('mean_acceptance_length'), '.2f', NA)}, per position "
        + ("/".join(f"{p:.2f}" for p in positions) if positions else NA)
        + f"; {_f(sd.get('drafts'), '.0f', NA)} drafts, {_f(sd.get('accepted_tokens'), '.0f', NA)}/"
        f"{_f(sd.get('draft_tokens'), '.0f', NA)} draft tokens accepted"
    )


def _server(summary: dict) -> list[str]:
    """What the server said: its SD counters (or, without them, its per-request counts), its
    throughput and load over the window, its prefix cache."""
    lines = []
    sd, srv = summary.get("spec_decode"), summary.get("server")
    reported = (summary.get("acceptance_client") or {}).get("server_reported")
    if sd:
        lines.append(f"Speculative decoding (server): {_sd_counts(sd)}")
    elif reported:  # no SD counters (SGLang's are gauges): the server's per-request counts
        lines.append(
            "Speculative decoding (server, per request): acceptance rate "
            f"{_f(reported.get('acceptance_rate'), '.3f', NA)}, "
            f"mean acceptance length {_f(reported.get('mean_acceptance_length'), '.2f', NA)}; "
            f"{_f(reported.get('accepted_tokens'), '.0f', NA)}/"
            f"{_f(reported.get('draft_tokens'), '.0f', NA)} draft tokens accepted over "
            f"{reported.get('requests')} requests"
        )
    rec = (summary.get("acceptance_client") or {}).get("reconciliation") or {}
    if rec.get("requests_checked"):  # what the rule checked, request by request (loadgen.measures.reconcile)
        lines.append(f"Accepted drafts against the stream: {rec['checked']}")
    if srv and srv.get("window_s") is not None:
        lines.append(
            f"Server over {srv['window_s']:.1f} s: {_f(srv.get('generation_tok_s'), '.1f')} generated tok/s"
            + "".join(
                f", {label} {_f(srv[k]['mean'], fmt)} mean"
                for label, k, fmt in (
                    ("running", "running", ".1f"),
                    ("waiting", "waiting", ".1f"),
                    ("KV usage", "kv_usage", ".1%"),
                )
                if srv.get(k)
            )
            + (", RESTARTED inside the window" if srv.get("restarted") else "")
        )
    if srv and srv.get("prefix_cache_hit_rate") is not None:
        lines.append(f"Prefix cache (server): {srv['prefix_cache_hit_rate']:.1%} of prompt tokens found cached")
    return lines


def _workload(summary: dict) -> list[str]:
    """Conversations by turn, a reasoning model's phases, goodput."""
    lines = []
    if summary.get("conversations"):
        c = summary["conversations"]
        lines.append(
            f"Conversations: {c['sessions']} ({c['turns']} turns; every turn ok in {c['all_turns_ok']}); "
            "by turn, prompt tokens / TTFT p50 ms: "
            + ", ".join(
                f"{k}: {t['prompt_tokens_mean']:.0f}/{_f(t['ttft_ms_p50'], '.1f')}"
                for k, t in sorted(c["by_turn"].items(), key=lambda kv: int(kv[0]))
            )
        )
    ph = summary.get("phases")
    if ph:
        parts = [f"{ph['reasoning_requests']} of {ph['requests']} requests thought"]
        if ph["reasoning_tokens"]["count"]:
            parts.append(
                f"reasoning / answer tokens {_f(ph['reasoning_tokens']['mean'], '.0f')}"
                f" / {_f(ph['answer_tokens']['mean'], '.0f')} mean"
            )
        parts.append(
            f"tokens per decode chunk thinking {_f(ph['tokens_per_chunk_reasoning'])}"
            f", answering {_f(ph['tokens_per_chunk_answer'])}"
        )
        if ph["tool_call_requests"]:
            parts.append(f"{ph['tool_call_requests']} called a tool")
        lines.append("Phases: " + "; ".join(parts))
    if summary.get("goodput"):
        g = summary["goodput"]
        lines.append(
            f"Goodput: {g['good']}/{g['judged']} requests met "
            + ", ".join(f"{k}<={v:g}ms" for k, v in g["objectives_ms"].items())
            + (f" ({g['req_s']:.2f} req/s)" if g["req_s"] is not None else "")
        )
    return lines


def _table(summary: dict) -> list[str]:
    """The latency percentiles, each phase's, and the client's own lateness and lag."""
    lines = [f"{'(ms)':<22}" + "".join(f"{c:>10}" for c in _COLS)]
    for label, key in _ROWS:
        d = summary[key]
        lines.append(f"{label:<22}" + "".join(f"{_f(d.get(c)):>10}" for c in _COLS))
    for label, key in _PHASE_ROWS:
        d = (summary.get("phases") or {}).get(key)
        if d and d.get("count"):
            lines.append(f"{label:<22}" + "".join(f"{_f(d.get(c)):>10}" for c in _COLS))
    chk = summary["self_check"]
    lines.append(f"{'Client lateness':<22}" + "".join(f"{_f(chk['lateness_ms'].get(c)):>10}" for c in _COLS))
    lines.append(f"{'Client loop lag':<22}" + "".join(f"{_f(chk['loop_lag_ms'].get(c)):>10}" for c in _COLS))
    lines.append(f"{'  over chunks':<22}" + "".join(f"{_f(chk['chunk_lag_ms'].get(c)):>10}" for c in _COLS))
    if "read_delay_ms" in chk:
        lines.append(f"{'First-chunk read':<22}" + "".join(f"{_f(chk['read_delay_ms'].get(c)):>10}" for c in _COLS))
    return lines


def _short_of_users(sending: dict) -> str:
    """A closed loop that never had all its users in flight, in words (the summary's `sending`)."""
    return (
        f"short_of_users: {sending['in_flight_bound']} users asked, at most {sending['in_flight_max']} requests "
        "were in flight at once (too few requests for the users, or each ended before the last "
        "user joined); the figures are those of the lower load"
    )


def warnings(summary: dict) -> list[str]:
    out = []
    chk = summary["self_check"]
    if chk["client_bound"]:
        emulated = ((summary.get("server") or {}).get("emulator")) is not None
        out.append(
            "WARNING: client_bound: the load generator itself was the bottleneck ("
            + "; ".join(chk["reasons"])
            + "); its latency figures include its own delay. "
            "Lower the load, or use more client cores (--workers N)"
            + (", or run the emulated GPU slower (--time-scale)." if emulated else ".")
        )
        slow = [str(w) for w, c in (chk.get("workers") or {}).items() if c["client_bound"]]
        if slow:
            out.append(
                f"  (worker(s) {', '.join(slow)} of {len(chk['workers'])} over their bounds; "
                "self_check.workers in the summary has each one's figures)"
            )
    emulator = (summary.get("server") or {}).get("emulator") or {}
    if emulator.get("behind"):
        delivered = emulator.get("delivered_of_model")
        out.append(
            "WARNING: server_behind: the emulator could not keep its model's pace here ("
            + (f"{delivered:.1%} of its model's throughput delivered, " if delivered is not None else "")
            + f"chunks up to {1e3 * (emulator.get('step_lag_p99_s_at_most') or 0):g} ms late at p99); "
            "its figures understate the emulated hardware. Run it slower (--time-scale) or lower the load."
        )
    sending = summary.get("sending") or {}
    for lost in sending.get("workers_lost") or []:
        out.append(f"WARNING: {lost}")
    if sending.get("short"):
        out.append(f"note: {_short_of_users(sending)}")
    if summary.get("window") and summary["window"]["kind"] == "full_run":
        out.append(
            "note: all requests were sent within one request lifetime, so there was no "
            "steady state; throughput covers the whole run including ramp-down. "
            "Send more requests (--num-requests) for a steady-state figure."
        )
    if summary["token_count_source"] not in ("continuous_usage", "none"):
        out.append(
            f"note: tokens per chunk are estimated ({summary['token_count_source']}); the "
            "server did not send usage on every chunk (continuous_usage_stats)"
        )
    if summary["interrupted"]:
        out.append("note: the run was interrupted; the results cover the requests that finished")
    return out


class ProgressBar:
    """The run's progress bar on stderr (none when quiet), from the moment the load starts."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.bar, self.failed = quiet, None, 0

    def start(self, total: int | None) -> None:
        from tqdm import tqdm

        tqdm.monitor_interval = 0  # no monitor thread in a process that measures latency
        self.bar = tqdm(
            total=total, unit="req", disable=self.quiet or None, leave=False, mininterval=0.5, file=sys.stderr
        )

    def update(self, done: int, failed: int) -> None:
        if self.bar is None:
            return
        self.failed += failed
        self.bar.update(done)
        if self.failed:
            self.bar.set_postfix(failed=self.failed, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
