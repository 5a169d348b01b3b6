"""The engine replaying recorded requests, each with its own plan of speculation steps.

Same scheduler, same step costs as the engine that serves (engine.py); what differs is who
decides the drafts: a request arrives with its prompt and output token ids and a plan, one
entry per decoding step (the first output token comes from the prefill alone), each saying
which drafter proposes how many drafts and how many tokens the step emits. So any policy a
trace allows (fixed k, an oracle, a per-position combination of drafters, k adapted per step)
runs under load, in virtual time, as the engine would run it.

What a step costs: the target's forward over every scheduled token (drafts included) plus the
fixed overhead, as in engine.py, plus, for every drafter that proposes for the next step of at
least one request in the batch, that drafter's price (profile.Drafter.time) for the requests
it drafts for, at the largest k among them, over the batch's KV (as the serving engine charges
its one drafter). No prefix caching (the study's traces are priced as computed in full). `price_as` charges
every drafter at one drafter's price instead (the study
charged its combined steps at the n-gram price).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import numpy as np

from servers.emulator import verification
from servers.emulator.engine import Engine, EngineConfig, EngineError, Sequence
from servers.emulator.profile import Profile


@dataclass(frozen=True)
class Live:
    """Steps decided as the engine serves, not planned: `drafter` proposes k drafts a step (k
    from the batch size: `k_by_batch[min(B, len - 1)]`, vLLM's num_speculative_tokens_per_batch_size
    lookup, or `k` throughout), and with `adaptive` the step's verification budget
    (verification.py) decides how many of them are verified, each draft's confidence the
    per-position conditional acceptance `confidence` (what vLLM's online estimator learns from
    its per-position terms alone). A step emits min(acceptance at its position, verified + 1)."""

    drafter: str
    k: int
    k_by_batch: tuple[int, ...] | None = None
    adaptive: bool = False
    confidence: tuple[float, ...] = ()


class ReplayEngine(Engine):
    def __init__(
        self,
        profile: Profile,
        cfg: EngineConfig = EngineConfig(),
        *,
        price_as: str | None = None,
        live: Live | None = None,
        mode: str | None = None,
    ) -> None:
        """`mode`: the drafter the replayed server was configured with, whose per-step cost of
        SD mode (profile.Drafter.mode_time) every step pays; a live engine's is its drafter's."""
        super().__init__(profile, None, cfg)
        self.prefix_cache = None  # a trace's token ids are not the emulated words: no prefix caching
        if price_as is not None and price_as not in profile.drafters:
            raise EngineError(f"profile {profile.name!r} has no {price_as} drafter to price steps at")
        self.price_as = price_as
        self.live = live
        if mode is not None:
            if mode not in profile.drafters:
                raise EngineError(f"profile {profile.name!r} has no {mode} drafter")
            self.drafter = profile.drafters[mode]
        if live is not None:
            if live.drafter not in profile.drafters:
                raise EngineError(f"profile {profile.name!r} has no {live.drafter} drafter")
            self.drafter = profile.drafters[live.drafter]
            if live.adaptive:
                self._av = verification.cost_tables(
                    profile, self.drafter, live.k, cfg.max_num_seqs, cfg.max_num_batched_tokens, self.max_model_len
                )
            self._conf = np.asarray(live.confidence, dtype=np.float64)

    def submit_live(
        self,
        request_id: str,
        prompt: list[int],
        output: list[int],
        acceptance: Seq[int] | np.ndarray,
        *,
        offered: Seq[int] | np.ndarray | None = None,
        arrival: float,
        sink: Callable | None = None,
        reasoning_end: int = 0,
    ) -> Sequence:
        """A request whose steps the engine's `live` rule decides: `acceptance`, per output
        position, the tokens a step starting there would emit with enough drafts; `offered`,
        an n-gram drafter's: the drafts its lookup has at each position (none: as many as asked)."""
        if self.live is None:
            raise EngineError("this engine replays plans: give it live= to decide steps as it serves")
        seq = self.submit_plan(request_id, prompt, output, [("", 0, 1)] * (len(output) - 1), arrival=arrival, sink=sink)
        seq.plan = None
        seq.acc = np.asarray(acceptance, dtype=np.int64)
        seq.offered = None if offered is None else np.asarray(offered, dtype=np.int64)
        if reasoning_end:
            seq.reasoning_end, seq.thinking = reasoning_end, max(reasoning_end - 2, 0)
        return seq

    def submit_plan(
        self,
        request_id: str,
        prompt: list[int],
        output: list[int],
        plan: Seq[tuple[str, int, int]],
        *,
        arrival: float,
        sink: Callable | None = None,
        reasoning_end: int = 0,
    ) -> Sequence:
        """`plan`: (drafter, drafts, emitted) per decoding step, from output position 1; the
        emitted tokens add up to len(output) - 1. Drafter "" proposes nothing. `reasoning_end`:
        the output's first that many tokens are thinking (streamed as a reasoning parser does)."""
        n = len(output)
        if n < 1:
            raise EngineError(f"request {request_id!r} has no output tokens")
        if sum(e for _, _, e in plan) != n - 1:
            raise EngineError(
                f"request {request_id!r}: the plan emits {sum(e for _, _, e in plan)} "
                f"tokens after the first, the output has {n - 1}"
            )
        for drafter, drafts, emitted in plan:
            if not 1 <= emitted <= drafts + 1:
                raise EngineError(f"request {request_id!r}: a step with {drafts} drafts cannot emit {emitted}")
            if drafter and drafter not in self.profile.drafters:
                raise EngineError(
                    f"profile {self.profile.name!r} has no {drafter} drafter "
                    f"(it has: {', '.join(sorted(self.profile.drafters))})"
                )
        if len(prompt) + n > self.max_model_len:
            raise EngineError(
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, you requested {len(prompt) + n} tokens."
            )
        if len(prompt) + n > self.kv_capacity:
            raise EngineError(
                f"the request needs {len(prompt) + n} tokens of KV cache; this engine holds {self.kv_capacity}"
            )
        seq = Sequence(request_id, list(prompt), list(output), [""] * n, [], "length", "replay", arrival, sink)
        seq.plan = list(plan)
        if reasoning_end:
            seq.reasoning_end, seq.thinking = reasoning_end, max(reasoning_end - 2, 0)
        return self._enqueue(seq)

    def _next_step(self, seq: Sequence, k: int = 0, n: int = 1):
        """The plan step a sequence that emits now will take next (None: it ends); a live
        request's: its drafter at k (`k`: the batch's), as far as the tokens left after this
        step (of `n` tokens: it emits as many as the trace accepts of them) allow."""
        if seq.plan is None and self.live is not None:
            pos = seq.emitted + (min(int(seq.acc[seq.emitted]), n) if seq.emitted else 1)  # type: ignore[index]
            drafts = min(k, len(seq.output) - 1 - pos)
            if seq.offered is not None and drafts > 0:
                drafts = min(drafts, int(seq.offered[pos]))
            return (self.live.drafter, drafts, 0) if drafts > 0 else None
        i, plan = seq.step_no + 1, seq.plan or []
        return plan[i] if i < len(plan) else None

    def _live_k(self, requests: int) -> int:
        """k after a step of `requests` scheduled requests (the live rule's)."""
        live = self.live
        if live is None:
            return 0
        kb = live.k_by_batch
        return kb[min(requests, len(kb) - 1)] if kb else live.k

    def commit(self, step, now: float):
        self._step_k = self._live_k(len(step.batch))  # the drafts proposed after this step
        return super().commit(step, now)

    def _drafting_time(self, batch, kv: int, verify: float) -> float:
        groups: dict[str, list[int]] = {}
        k = self._live_k(len(batch))
        for seq, n in batch:
            if seq.computed + n < seq.context:
                continue  # a prefill chunk: it does not emit yet
            nxt = self._next_step(seq, k, n)
            if nxt is not None and nxt[0] and nxt[1] > 0:  # priced as one drafter: one group
                groups.setdefault(self.price_as or nxt[0], []).append(nxt[1])
        # a request whose drafter had nothing to offer (an n-gram miss) verifies no drafts: it
        # costs nothing, and a step where no request has drafts takes no drafting path at all
        return sum(
            self.profile.drafters[drafter].time(max(drafts), len(drafts), kv, verify, drafts=sum(drafts))
            for drafter, drafts in groups.items()
        )

    def _accepted(self, seq: Sequence, drafts: int) -> int:
        plan = seq.plan
        if plan is None:  # live: the acceptance at its position, of the drafts verified
            return min(int(seq.acc[seq.emitted]) - 1, drafts)  # type: ignore[index]  # a live request has it
        assert plan is not None  # a replayed request has its plan
        emitted = plan[seq.step_no][2]
        accepted = min(emitted - 1, drafts)
        if accepted < emitted - 1:
            # the token budget cut this step's drafts: the tokens it could not emit are
            # written one per step, so the plan's later steps start where they should
            plan[seq.step_no + 1 : seq.step_no + 1] = [("", 0, 1)] * (emitted - 1 - accepted)
        return accepted

    def _propose(self, seq: Sequence, new_tokens: list[int]) -> None:
        if seq.plan is None and self.live is not None:
            drafts = min(self._step_k, seq.remaining - 1)  # no draft past its last token
            if seq.offered is not None:  # an n-gram lookup offers what it matched, at most
                drafts = min(drafts, int(seq.offered[seq.emitted]))
            seq.drafts = max(0, drafts)
            if self._av is not None:
                seq.conf_before = seq.conf_now
                seq.conf_now = self._conf
            return
        seq.step_no += 1
        plan = seq.plan or []
        step = plan[seq.step_no] if seq.step_no < len(plan) else None
        seq.drafts = step[1] if step is not None else 0
