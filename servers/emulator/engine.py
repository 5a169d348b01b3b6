"""The engine, clock-agnostic: it plans a step, says how long the step takes, and applies its
outcome when told the step is over. A real-time driver (realtime.py) sleeps through the step;
the simulator (loadgen/simulate/virtual.py) jumps its virtual clock over it. One engine, two clocks.

What a step does, as vLLM's v1 scheduler does it:
- running requests first, in arrival order: a decoding request needs 1 + its drafts tokens, a
  prefilling one the rest of its prompt (chunked to the token budget);
- then waiting requests, first come first served, while the budget, `max_num_seqs` and the KV
  cache allow; if a running request cannot grow, the latest admitted one is preempted (its KV
  freed, recomputed later) and no new request is admitted that step;
- the step costs one target forward over all scheduled tokens (drafts included: verifying them
  is what makes speculation expensive under load) plus proposing the next drafts plus a fixed
  overhead;
- each decoding request then accepts a prefix of its drafts and emits accepted + 1 tokens;
  a request whose prefill completed emits its first token.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from servers.emulator import content, tokens, verification
from servers.emulator.counters import EngineStats
from servers.emulator.drafting import Drafting, RequestSD, exact_trace
from servers.emulator.ngram import NgramIndex
from servers.emulator.prefix import PrefixCache
from servers.emulator.profile import Profile, ProfileError
from servers.emulator.spec import SpecConfig


class EngineError(ValueError):
    pass


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None  # default: the profile's
    kv_capacity_tokens: int | None = None  # default: the profile's
    seed: int = 0
    per_request_spec_decode_metrics: str = "none"  # none | summary | detailed, as vLLM's flag
    enable_prefix_caching: bool = True  # as vLLM's default (servers/emulator/prefix.py)
    # the served model thinks before it answers a chat request (served with --reasoning-parser:
    # docs/emulator.md, "Reasoning models")
    reasoning: bool = False
    # the model calls a request's tools when it sees fit (--enable-auto-tool-choice with a parser)
    tool_calls: bool = False
    # every request keeps its steps (drafted, accepted, emitted) for the server's --step-log
    step_log: bool = False


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the engine. Its whole output is decided when it arrives (the
    emulated model is deterministic); steps reveal it."""

    request_id: str
    prompt: list[int]
    output: list[int]
    words: list[str]
    prompt_words: list[str]
    finish_reason: str
    kind: str
    arrival: float
    sink: Callable | None = None
    computed: int = 0  # tokens whose KV exists
    emitted: int = 0  # output tokens emitted so far
    drafts: list[int] | int = 0  # drafts proposed for the next step (tokens, or a count)
    beyond: list[int] = field(default_factory=list)  # the model's next tokens past max_tokens (no stream shows them)
    acc: np.ndarray | None = None  # model drafter: tokens a step at each position yields
    confidence: list | None = None  # ... and each draft's chance (drafting.acceptance_and_confidence)
    # adaptive verification: the confidences of the drafts proposed for the next step, and of
    # the step before's (what vLLM's host has when it sets the budget: 1.0 for a new request);
    # the drafts the scheduler scheduled in the step being applied (before the budget cut them)
    conf_now: np.ndarray | None = None
    conf_before: np.ndarray | None = None
    scheduled_drafts: int = 0
    offered: np.ndarray | None = None  # a replayed n-gram request: the drafts its lookup has, per position
    ngram: NgramIndex | None = None
    rng: np.random.Generator | None = None  # synthetic acceptance's draws
    sd: RequestSD | None = None  # per-request SD metrics, when the server reports them
    plan: list | None = None  # a replayed request's steps (servers/emulator/replay.py)
    step_no: int = -1  # its plan's next step
    trace: dict | None = None  # exact acceptance per drafter, when the engine keeps traces
    # a thinking model's output: tokens [0, reasoning_end) are its thinking, markers included
    # (0: none); `thinking` tokens of it between the markers (what vLLM counts as reasoning)
    reasoning_end: int = 0
    thinking: int = 0
    tool_call: tuple[str, str] | None = None  # the answer is a call of this tool (name, call id)
    first_scheduled: float | None = None
    max_tokens_param: int | None = None  # max_tokens as the request set it (vLLM's histogram of it)
    cached: int = 0  # prompt tokens its latest admission found in the prefix cache
    preemptions: int = 0
    # with the step log: each step that emitted for it, [drafted, accepted, emitted, chunk] (the
    # API sets chunk: which of its stream's chunks carried the step)
    steps: list[list[int]] | None = None
    first_token: float | None = None
    last_token: float | None = None
    finished: bool = False

    @property
    def context(self) -> int:
        return len(self.prompt) + self.emitted

    @property
    def remaining(self) -> int:
        return len(self.output) - self.emitted

    @property
    def reasoning_tokens(self) -> int:
        """Reasoning tokens emitted so far, as vLLM's reasoning parser counts them (those
        between the markers)."""
        return min(max(self.emitted - 1, 0), self.thinking) if self.reasoning_end else 0

    @property
    def num_drafts(self) -> int:
        return self.drafts if isinstance(self.drafts, int) else len(self.drafts)


@dataclass(slots=True)
class Emission:
    seq: Sequence
    tokens: list[int]
    words: list[str]
    finished: bool
    start: int = 0  # the output position of its first token
    steps: tuple[int, ...] = ()  # with the step log: its steps (indices into seq.steps)


@dataclass(slots=True)
class Step:
    batch: list[tuple[Sequence, int]]  # (sequence, tokens processed this step)
    duration: float
    batched_tokens: int
    start: float


class Engine:
    def __init__(
        self,
        profile: Profile,
        spec: SpecConfig | None,
        cfg: EngineConfig = EngineConfig(),
        *,
        trace_sink: Callable[[dict], None] | None = None,
    ) -> None:
        if spec is not None and spec.method not in profile.drafters:
            raise EngineError(
                f"profile {profile.name!r} has no {spec.method} drafter "
                f"(it has: {', '.join(sorted(profile.drafters)) or 'none'})"
            )
        self.profile = profile
        self.spec = spec
        self.cfg = cfg
        self.drafter = profile.drafters[spec.method] if spec else None
        self.drafting = Drafting(profile, spec, cfg.seed, cfg.per_request_spec_decode_metrics) if spec else None
        self.max_model_len = cfg.max_model_len or profile.max_model_len
        self.kv_capacity = cfg.kv_capacity_tokens or profile.kv_capacity_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = EngineStats(spec_accepted_per_pos=[0] * (spec.k if spec else 0))
        self.trace_sink = trace_sink  # gets each finished request's exact acceptance trace
        self._kv_used = 0
        self.prefix_cache = PrefixCache(self.kv_capacity) if cfg.enable_prefix_caching else None
        # k per batch size (num_speculative_tokens_per_batch_size), None: always spec.k
        self._k_by_batch = spec.k_by_batch(cfg.max_num_seqs) if spec is not None and spec.schedule else None
        self._step_k = spec.k if spec is not None else 0  # the drafts the step being applied proposes
        # adaptive verification (verification.py): the cost curves vLLM profiles at start-up
        self.notes: list[str] = []  # what the server says at start-up about its configuration
        self.tokens: tokens.ModelTokens | None = None  # a model's own tokenizer counting prompts, or the words
        self._av: verification.CostTables | None = None
        if spec is not None and spec.adaptive_verification:
            if spec.method in ("ngram", "suffix"):
                self.notes.append(
                    f"enable_adaptive_verification does not apply to {spec.method}: its drafts carry no "
                    "probabilities to budget by (vLLM's n-gram speculator has no such flag); every draft is verified"
                )
            else:
                self._av = verification.cost_tables(
                    profile, self.drafter, spec.k, cfg.max_num_seqs, cfg.max_num_batched_tokens, self.max_model_len
                )

    # -- requests ---------------------------------------------------------------------------
    def submit(
        self,
        request_id: str,
        prompt_text: str,
        max_tokens: int,
        *,
        arrival: float,
        ignore_eos: bool = False,
        min_tokens: int | None = None,
        sink: Callable | None = None,
        think: bool = False,
        thinking_budget: int | None = None,
        tool: tuple[str, str, str] | None = None,
        max_tokens_param: int | None = None,
        prompt_tokens: int | None = None,
    ) -> Sequence:
        """A request. `prompt_tokens`: the prompt's length as the model's tokenizer counts it
        (servers/emulator/tokens.py), where the emulator's words would count another. `think`:
        the model thinks first (a chat request to a reasoning model), at most `thinking_budget`
        tokens (vLLM's thinking_token_budget); `tool`: its answer is a call of that tool (name,
        argument, call id) rather than text; `max_tokens_param`: max_tokens as the request set
        it (None: the server's default)."""
        words, ids = content.tokenize(prompt_text)
        if prompt_tokens is not None:
            ids, words = tokens.fit(ids, words, prompt_tokens)
        self._check_fits(len(ids), max_tokens)
        kind = content.classify(prompt_text)
        params = self.profile.content(kind)
        think_ids, think_words = self._thinking(kind, prompt_text, ids, words, thinking_budget) if think else ([], [])
        before = len(think_ids)
        rng = content.rng_for(self.cfg.seed, prompt_text)
        if tool is not None:
            n = max_tokens - before if ignore_eos else max(content.tool_call_length(rng), (min_tokens or 0) - before)
        else:
            n = (
                max_tokens - before
                if ignore_eos
                else max(content.natural_length(params, rng), (min_tokens or 0) - before)
            )
        n = max(0, min(n, max_tokens - before))
        # cut off by max_tokens, the model would have gone on: the tokens a last step's drafts
        # are checked against past the end (vLLM counts those accepted: Sequence.beyond)
        more = self.spec.k if self.spec is not None and n >= max_tokens - before and tool is None and not think else 0
        if tool is not None:
            out_ids, out_words = content.tool_call(tool[0], tool[1], n, rng)
        elif params.templated:
            template = content.template_of(prompt_text)
            out_ids, out_words = content.generate_templated(
                ids,
                words,
                len(template.split()),
                n + more,
                params,
                content.rng_for(self.cfg.seed, "template\0" + template),
                rng,
            )
        else:
            out_ids, out_words = content.generate(ids, words, n + more, params, rng)
        beyond, out_ids, out_words = out_ids[n:], out_ids[:n], out_words[:n]
        if think:
            out_ids, out_words = (think_ids + out_ids)[:max_tokens], (think_words + out_words)[:max_tokens]
            n = before + n
        finish = "length" if n >= max_tokens else ("tool_calls" if tool is not None else "stop")
        seq = Sequence(request_id, ids, out_ids, out_words, words, finish, kind, arrival, sink)
        seq.beyond, seq.max_tokens_param = beyond, max_tokens_param
        if think:
            seq.reasoning_end, seq.thinking = before, before - 2
        if tool is not None:
            seq.tool_call = (tool[0], tool[2])
        if self.drafting is not None:
            self.drafting.start(seq, prompt_text)
        if self.trace_sink is not None:
            seq.trace = exact_trace(self.profile, self.spec, self.cfg.seed, seq, prompt_text)
        return self._enqueue(seq)

    def _thinking(self, kind: str, prompt_text: str, ids, words, budget: int | None) -> tuple[list[int], list[str]]:
        """A thinking model's thought, markers included: its length drawn for this kind of
        request (cut at `budget` thinking tokens), its text from its own draws."""
        try:
            params = self.profile.thinking(kind)
        except ProfileError as e:  # a profile whose data has no thought in it: the request is refused
            raise EngineError(str(e)) from None
        rng = content.rng_for(self.cfg.seed, "thinking\0" + prompt_text)
        r = content.natural_length(params, rng)
        if budget is not None:
            r = min(r, budget)
        t_ids, t_words = content.generate(ids, words, r, params, rng) if r else ([], [])
        return [content.THINK_START, *t_ids, content.THINK_END], ["<think>", *t_words, "</think>"]

    def _enqueue(self, seq: Sequence) -> Sequence:
        self.waiting.append(seq)
        self.stats.waiting = len(self.waiting)
        return seq

    def trace(self, seq: Sequence) -> dict:
        """The request as an acceptance trace (docs/whatif.md's JSONL form), with the exact
        acceptance of every drafter this engine's profile has; needs a trace_sink."""
        if seq.trace is None:
            raise EngineError("this engine keeps no traces (give it a trace_sink)")
        return {
            "id": seq.request_id,
            "prompt_token_ids": list(seq.prompt),
            "generated_token_ids": list(seq.output),
            **({"reasoning_end": seq.reasoning_end} if seq.reasoning_end else {}),
            **{f"acc_{m}": a for m, a in seq.trace.items()},
        }

    def abort(self, seq: Sequence) -> None:
        if seq.finished:
            return
        seq.finished = True
        if seq in self.running:
            self.running.remove(seq)
            self._kv_used -= seq.computed
        elif seq in self.waiting:
            self.waiting.remove(seq)
        if self.drafting is not None:
            self.drafting.finish(seq)
        self.stats.request_success["abort"] += 1
        self._gauges()

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def run_to_end(self, now: float = 0.0) -> float:
        """Serve everything queued, steps back to back in virtual time from `now`; when the last
        step ends (no new arrivals: B requests submitted together run as an offline batch)."""
        while self.has_work:
            step = self.plan(now)
            if step is None:
                raise EngineError("the engine has work but could not schedule any of it")
            now += step.duration
            self.commit(step, now)
        return now

    # -- one step ---------------------------------------------------------------------------
    def plan(self, now: float) -> Step | None:
        budget = self.cfg.max_num_batched_tokens
        batch: list[tuple[Sequence, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            need = seq.context - seq.computed
            if seq.emitted and need == 1:
                n = min(1 + seq.num_drafts, budget)
            else:
                n = min(need, budget)
            while self._kv_used + n > self.kv_capacity and self.running[-1] is not seq:
                self._preempt(self.running[-1])  # the latest admitted gives way
                preempted = True
            if self._kv_used + n > self.kv_capacity:  # seq is the latest: it waits
                self._preempt(seq)
                preempted = True
                break
            self._kv_used += n
            batch.append((seq, n))
            budget -= n
            i += 1
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            cached = self._cached(seq)
            n = min(seq.context - seq.computed - cached, budget)
            if self._kv_used + cached + n > self.kv_capacity:
                break
            if self.prefix_cache is not None and not seq.computed:
                self.stats.prefix_queries += len(seq.prompt)
                self.stats.prefix_hits += cached
                seq.cached = cached
            if cached:  # its prompt's cached blocks: their KV is there, not computed again
                seq.computed += cached
                self._kv_used += cached
            self.waiting.popleft()
            self.running.append(seq)
            if seq.first_scheduled is None:
                seq.first_scheduled = now
            self._kv_used += n
            batch.append((seq, n))
            budget -= n
        if not batch:
            return None
        if self._av is not None:
            self._budget(batch)
        batched = sum(n for _, n in batch)
        kv = sum(seq.computed + n for seq, n in batch)
        verify = self.profile.forward.time(kv, batched)
        duration = verify + self.profile.step_overhead + self._drafting_time(batch, kv, verify)
        d = self.drafter
        if d is not None and (d.mode_per_step or d.mode_per_token):  # what SD mode adds to every step
            duration += float(d.mode_time(batched))
        self._gauges()
        return Step(batch, duration, batched, now)

    def _budget(self, batch: list[tuple[Sequence, int]]) -> None:
        """Adaptive verification: the step verifies the drafts its budget admits (in place);
        each request keeps how many the scheduler scheduled, which is what vLLM counts."""
        with_drafts = [
            i for i, (seq, n) in enumerate(batch) if n > 1 and seq.emitted and seq.computed == seq.context - 1
        ]
        if not with_drafts:
            return
        scheduled = np.array([batch[i][1] - 1 for i in with_drafts], dtype=np.int64)
        non_draft = sum(n for _, n in batch) - int(scheduled.sum())
        sampling = len(batch)  # every request samples but a prefill chunk short of its prompt's end
        sampling -= sum(1 for seq, n in batch if not seq.emitted and seq.computed + n < seq.context)
        k = int(scheduled.max())
        stale = [_padded(batch[i][0].conf_before, k) for i in with_drafts]
        now = [_padded(batch[i][0].conf_now, k) for i in with_drafts]
        draft_budget = verification.budget(stale, scheduled, non_draft, sampling, len(batch), self._av)  # type: ignore[arg-type]
        admitted = verification.admit(now, scheduled, draft_budget)
        for i, d, a in zip(with_drafts, scheduled.tolist(), admitted.tolist()):
            seq, n = batch[i]
            seq.scheduled_drafts = d
            self._kv_used -= d - a
            batch[i] = (seq, 1 + a)

    def _check_fits(self, prompt: int, max_tokens: int) -> None:
        """vLLM's refusal of a request longer than the model's context; the KV cache's."""
        if prompt + max_tokens > self.max_model_len:
            raise EngineError(
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, you requested {prompt + max_tokens} tokens "
                f"({prompt} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion."
            )
        if prompt + max_tokens > self.kv_capacity:
            raise EngineError(
                f"the request needs {prompt + max_tokens} tokens of KV cache; this engine holds {self.kv_capacity}"
            )

    def _cached(self, seq: Sequence) -> int:
        """Prompt tokens the prefix cache holds for a request being admitted (0 when it resumes
        a partly computed prefill)."""
        if self.prefix_cache is None or seq.computed:
            return 0
        return self.prefix_cache.lookup(seq.prompt_words)

    def _drafting_time(self, batch: list[tuple[Sequence, int]], kv: int, verify: float) -> float:
        """Proposing the next step's drafts for every sequence that emits this step and will
        go on."""
        if self.drafter is None:
            return 0.0
        k = self._k_for(len(batch))
        if self.spec.method in ("ngram", "suffix"):  # type: ignore[union-attr]
            # a lookup drafter is priced for the drafts it has (proposed at the last commit, verified
            # in this step): a miss costs nothing, as in the replay engine; one step late, the same in all
            held = [seq.num_drafts for seq, n in batch if seq.emitted and n > 1]
            return self.drafter.time(k, len(held), kv, verify, drafts=sum(held)) if held else 0.0
        drafting = [seq for seq, n in batch if seq.computed + n >= seq.context and seq.remaining > 1]
        return self.drafter.time(k, len(drafting), kv, verify)

    def _k_for(self, requests: int) -> int:
        """Drafts to propose after a step of `requests` scheduled requests: spec.k, or with a
        schedule, as vLLM's scheduler picks it from the number of requests it scheduled."""
        if self._k_by_batch is None:
            return self.spec.k  # type: ignore[union-attr]  # drafts are asked for only with a spec
        return self._k_by_batch[min(requests, len(self._k_by_batch) - 1)]

    def commit(self, step: Step, now: float) -> list[Emission]:
        """The step is over at `now`: apply what it computed; return the emitted tokens."""
        emissions = []
        stats = self.stats
        stats.steps += 1
        if self.spec is not None:
            self._step_k = self._k_for(len(step.batch))
        stats.iteration_tokens.observe(step.batched_tokens)
        for seq, n in step.batch:
            if seq.finished:  # aborted during the step
                continue
            decoding = seq.emitted > 0 and seq.computed == seq.context - 1
            seq.computed += n
            if seq.computed < seq.context:
                continue  # a prefill chunk; more to come
            drafted = accepted = 0
            if decoding:
                if self.spec is not None:
                    self.stats.spec_verify_calls += 1
                if seq.sd is not None:
                    seq.sd.decode_steps += 1
                drafted = max(seq.scheduled_drafts, n - 1)  # as _verify counts them
                accepted = self._verify(seq, n - 1, seq.scheduled_drafts)
                seq.scheduled_drafts = 0
                seq.computed -= (n - 1) - accepted  # rejected drafts' KV is freed
                self._kv_used -= (n - 1) - accepted
                count = accepted + 1
            else:
                count = 1
            em = self._emit(seq, count, now)
            if self.cfg.step_log:
                if seq.steps is None:
                    seq.steps = []
                em.steps = (len(seq.steps),)
                seq.steps.append([drafted, accepted, len(em.tokens), -1])
            emissions.append(em)
        self._gauges()
        return emissions

    # -- internals --------------------------------------------------------------------------
    def _verify(self, seq: Sequence, drafts: int, scheduled: int = 0) -> int:
        """How many of the drafts the target accepts, and count them as vLLM's scheduler does:
        the drafts it scheduled (`scheduled`, when adaptive verification verified fewer), a step
        with none (k = 0) not at all."""
        scheduled = max(scheduled, drafts)
        if scheduled <= 0:
            return 0
        accepted = self._accepted(seq, drafts) if drafts > 0 else 0
        if seq.finish_reason != "length":  # the model's end of sequence: no draft after it is accepted
            accepted = min(accepted, seq.remaining - 1)
        if seq.sd is not None:
            seq.sd.observe(scheduled, accepted)
        stats = self.stats
        stats.spec_drafts += 1
        stats.spec_draft_tokens += scheduled
        stats.spec_accepted_tokens += accepted
        per_pos = stats.spec_accepted_per_pos
        if accepted > len(per_pos):
            per_pos.extend([0] * (accepted - len(per_pos)))
        for j in range(accepted):
            per_pos[j] += 1
        return accepted

    def _accepted(self, seq: Sequence, drafts: int) -> int:
        return self.drafting.accepted(seq, drafts)  # type: ignore[union-attr]  # only with a spec

    def _emit(self, seq: Sequence, count: int, now: float) -> Emission:
        start = seq.emitted
        tokens = seq.output[start : start + count]
        words = seq.words[start : start + count]
        seq.emitted += len(tokens)
        stats = self.stats
        stats.generation_tokens += len(tokens)
        if seq.first_token is None:
            seq.first_token = now
            if self.prefix_cache is not None:  # the prompt's blocks are computed: cached
                self.prefix_cache.insert(seq.prompt_words)
            stats.prompt_tokens += len(seq.prompt)
            stats.prompt_cached += seq.cached
            stats.prompt_computed += len(seq.prompt) - seq.cached
            stats.ttft.observe(now - seq.arrival)
            stats.queue.observe((seq.first_scheduled or now) - seq.arrival)
            stats.prefill.observe(now - (seq.first_scheduled or now))
        else:
            stats.itl.observe(now - seq.last_token)  # type: ignore[operator]  # set with the first token
        seq.last_token = now
        done = seq.remaining <= 0
        if done:
            self._finish(seq, now)
        else:
            self._propose(seq, tokens)
        return Emission(seq, tokens, words, done, start)

    def _propose(self, seq: Sequence, new_tokens: list[int]) -> None:
        """Drafts for the sequence's next step: k, also when fewer tokens are left to write (vLLM
        schedules no partial drafts; those accepted past max_tokens are counted, not emitted),
        within max_model_len (vLLM's scheduler caps a step there)."""
        if self.spec is None:
            return
        k = max(0, min(self._step_k, self.max_model_len - 1 - seq.context))
        seq.drafts = self.drafting.propose(seq, new_tokens, k)  # type: ignore[union-attr]
        if self._av is not None:  # what the host has when it budgets the next step: these, a step late
            seq.conf_before = seq.conf_now
            seq.conf_now = self.drafting.confidence(seq, k)  # type: ignore[union-attr]

    def _finish(self, seq: Sequence, now: float) -> None:
        seq.finished = True
        self.running.remove(seq)
        self._kv_used -= seq.computed
        stats = self.stats
        stats.request_success[seq.finish_reason] += 1
        if self.drafting is not None:
            self.drafting.finish(seq)
        if self.prefix_cache is not None:  # prompt and output, as a later turn sends them back
            self.prefix_cache.insert(seq.prompt_words + seq.words[: seq.emitted])
        stats.e2e.observe(now - seq.arrival)
        stats.decode.observe(now - seq.first_token)  # type: ignore[operator]  # it emitted before finishing
        stats.request_prompt_tokens.observe(len(seq.prompt))
        stats.request_generation_tokens.observe(seq.emitted)
        stats.inference.observe(now - (seq.first_scheduled or now))
        stats.max_generation_tokens.observe(seq.emitted)
        stats.params_n.observe(1)
        stats.request_preemptions.observe(seq.preemptions)
        stats.prefill_computed.observe(len(seq.prompt) - seq.cached)
        if seq.max_tokens_param:
            stats.params_max_tokens.observe(seq.max_tokens_param)
        if seq.emitted > 1:
            stats.tpot.observe((now - seq.first_token) / (seq.emitted - 1))  # type: ignore[operator]
        if seq.trace is not None and self.trace_sink is not None:
            self.trace_sink(self.trace(seq))

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._kv_used -= seq.computed
        seq.computed = 0
        seq.preemptions += 1
        self.waiting.appendleft(seq)
        self.stats.preemptions += 1

    def _gauges(self) -> None:
        s = self.stats
        s.running, s.waiting = len(self.running), len(self.waiting)
        s.kv_usage = self._kv_used / self.kv_capacity


def _padded(conf: np.ndarray | None, k: int) -> np.ndarray:
    """A request's confidences over k slots: 1.0 where none were noted (vLLM's start for a new
    request, and the slots a smaller k left)."""
    out = np.ones(k, dtype=np.float64)
    if conf is not None:
        out[: min(k, len(conf))] = conf[:k]
    return out
