"""`loadgen-emulator serve MODEL [vLLM flags]`: the emulated engine behind vLLM's API, started
the way `vllm serve` is. Prints `listening on http://HOST:PORT` once it accepts connections."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import NoReturn

from servers import engines
from servers.emulator import chat
from servers.emulator import profile as profiles
from servers.emulator.api import EmulatorAPI
from servers.emulator.engine import Engine, EngineConfig, EngineError
from servers.emulator.metrics import collector_for, missing, registry
from servers.emulator.realtime import RealtimeDriver
from servers.emulator.spec import SpecError, parse
from servers.emulator.tokens import ModelTokens
from servers.http import announce_and_wait, serve

log = logging.getLogger("loadgen.emulator")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loadgen-emulator", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve MODEL as vllm serve would, on the emulated engine")  # vLLM's flags
    s.add_argument("model", metavar="MODEL")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000, help="0 lets the OS choose")
    s.add_argument("--speculative-config", "--speculative_config", dest="speculative_config")
    s.add_argument("--served-model-name", nargs="+")
    s.add_argument(
        "--tensor-parallel-size",
        "-tp",
        type=int,
        default=1,
        help="checked against the cost profile's (its GPUs are emulated, not used)",
    )
    s.add_argument("--max-num-seqs", type=int, default=256)
    s.add_argument("--max-num-batched-tokens", type=int, default=8192)
    s.add_argument("--max-model-len", type=int)
    s.add_argument("--disable-log-stats", action="store_true", help="no vllm: metrics, as vLLM")
    s.add_argument("--api-key")
    _emulator_flags(s)
    s.add_argument(
        "--per-request-spec-decode-metrics",
        choices=("none", "summary", "detailed"),
        default="none",
        help="each response carries metrics.speculative_decoding (on the final usage chunk when "
        "streaming), as vLLM's flag: summary, or detailed (plus the per-step lists)",
    )
    s.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse the KV of cached prompt blocks (on by default, as in vLLM; servers/emulator/prefix.py)",
    )
    s.add_argument(
        "--enable-log-requests",
        action="store_true",
        help="log each request's prompt and parameters as received (vLLM logs the prompt at DEBUG)",
    )
    s.add_argument("--max-log-len", type=int, help="log at most this many characters and token ids of a prompt")
    s.add_argument(
        "--stream-interval",
        type=int,
        default=1,
        help="as vLLM's flag: stream a chunk every N tokens (the first and the last always); a "
        "request's stream_interval field may ask for more, not fewer",
    )
    s.add_argument(
        "--reasoning-parser",
        help="serve a thinking model: on chat requests it thinks first, streamed as `reasoning` "
        "(docs/emulator.md, Reasoning models); one of vLLM 0.32's parser names",
    )
    s.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="the model calls the request's tools when it sees fit (needs --tool-call-parser)",
    )
    s.add_argument("--tool-call-parser", help="stream tool calls as `tool_calls` deltas; one of vLLM 0.32's names")
    _client_test_flags(s)
    return p


def _client_test_flags(s: argparse.ArgumentParser) -> None:
    """The flags a test of a client uses (no vLLM has them): the server's own records of what it
    sent and did (--chunk-log, --step-log), a send buffer small enough for a slow reader to show,
    and a crash on cue."""
    s.add_argument(
        "--chunk-log",
        metavar="FILE",
        help="append each streamed response's record (JSONL): every chunk as written (monotonic "
        "ns, cumulative completion and reasoning tokens, phase 0 answer / 1 reasoning / 2 tool call)",
    )
    s.add_argument(
        "--step-log",
        metavar="FILE",
        help="append each finished request's engine steps (JSONL): per step the drafts verified, "
        "those accepted, the tokens emitted and the stream chunk that carried them; the server's "
        "own record, to check a reader's counts against (docs/emulator.md, The step log)",
    )
    s.add_argument(
        "--send-buffer",
        type=int,
        metavar="BYTES",
        help="hold at most this many response bytes unsent (socket send buffer and write buffer): "
        "with a slow reader the server then waits, and merges the steps it has not sent into one "
        "chunk, as vLLM's output collector does",
    )
    s.add_argument(
        "--exit-after-requests",
        type=int,
        metavar="N",
        help="fault injection: crash (exit 70 at once, streams cut) when request N+1 arrives",
    )


def _emulator_flags(s: argparse.ArgumentParser) -> None:
    """The flags only the emulator takes (no vLLM has them): its cost profile, its model's seed
    and size, how it counts prompts, its clock and its acceptance traces."""
    s.add_argument("--profile", help=f"cost profile (default: by MODEL); one of {', '.join(profiles.available())}")
    s.add_argument("--seed", type=int, default=0, help="seeds the emulated model's output")
    s.add_argument("--kv-cache-tokens", type=int, help="KV cache size in tokens (default: the profile's)")
    s.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="count each prompt's tokens with the model's own tokenizer and chat template "
        "(tokenizer.json in DIR; 'model': MODEL's directory), as the real engine counts them "
        "(servers/emulator/tokens.py)",
    )
    s.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="run the emulated GPU S times slower than its model (every modeled duration x S; "
        "its metrics stay in emulated time); for machines that cannot keep the model's pace. "
        "Changed at run time by POST /emulator/clock",
    )
    s.add_argument(
        "--flavor",
        choices=engines.flavors(),
        default=engines.get(engines.emulator()).dialect,
        help="the dialect it answers in (servers/engines/dialect.py): vLLM's (default), or another "
        "engine's metric names and path, /v1/models owner and per-request SD details (SGLang's: "
        "sglext.spec_tokens_details, asked with return_spec_tokens_details), for a deployment of "
        "that engine (its module's `emulated` adds it)",
    )
    s.add_argument(
        "--acceptance-traces",
        metavar="FILE",
        help="append each finished request's exact acceptance trace (JSONL, docs/whatif.md): "
        "its token ids and, for every drafter of the profile, what a step at each position "
        "would emit",
    )


def _fail(message: str) -> NoReturn:
    print(f"loadgen-emulator: error: {message}", file=sys.stderr)
    sys.exit(2)


def build(args) -> tuple[Engine, list[str]]:
    """The engine `serve` runs and the names it serves (exits with one line on a bad flag)."""
    try:
        return engine_for(args)
    except ValueError as e:
        _fail(str(e))


def engine_from_command(argv) -> tuple[Engine, list[str]]:
    """The engine a rendered `serve MODEL ...` command line would serve, built here without
    serving it (a sweep in virtual time simulates each variant's exact configuration);
    ValueError naming the flag when one is wrong."""
    argv = list(argv)
    args, _ = _parser().parse_known_args(argv[argv.index("serve") :])
    return engine_for(args)


def profile_of_command(argv) -> str | None:
    """The profile a rendered `serve MODEL ...` command line would price with (its --profile, or
    the one whose models name the model), without building the engine; None where none does."""
    argv = list(argv)
    args, _ = _parser().parse_known_args(argv[argv.index("serve") :])
    return _profile_name(args)


def _profile_name(args) -> str | None:
    return args.profile or next(
        (p for p in map(profiles.for_model, [args.model, *(args.served_model_name or [])]) if p), None
    )


def engine_for(args) -> tuple[Engine, list[str]]:
    name = _profile_name(args)
    if name is None:
        raise ValueError(
            f"no profile for model {args.model!r}; pass --profile (one of {', '.join(profiles.available())})"
        )
    try:
        prof = profiles.load(name)
        spec = parse(args.speculative_config)
        if args.stream_interval < 1:
            raise ValueError(f"--stream-interval must be at least 1, got {args.stream_interval}")
        if args.send_buffer is not None and args.send_buffer < 1:
            raise ValueError(f"--send-buffer must be at least 1 byte, got {args.send_buffer}")
        alone = _asked_per_request(args.flavor)
        if alone and args.per_request_spec_decode_metrics != "none":
            raise ValueError(
                f"--per-request-spec-decode-metrics is vLLM's; --flavor {args.flavor} answers as its engine does "
                "(per-request details when a request asks)"
            )
        if gaps := missing(engines.dialect(args.flavor).metrics):
            raise ValueError(f"--flavor {args.flavor}: the emulator has no figure for its {', '.join(gaps)}")
        if spec is None and args.per_request_spec_decode_metrics != "none":  # vLLM's VllmConfig check
            raise ValueError(
                "--per-request-spec-decode-metrics requires speculative decoding to be enabled "
                "(via --speculative-config)"
            )
        chat.check_parsers(args.reasoning_parser, args.tool_call_parser, args.enable_auto_tool_choice)
        if not args.time_scale > 0:
            raise ValueError(f"--time-scale must be > 0, got {args.time_scale}")
        for key in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "kv_cache_tokens",
            "tensor_parallel_size",
        ):
            v = getattr(args, key)
            if v is not None and v < 1:
                raise ValueError(f"--{key.replace('_', '-')} must be >= 1, got {v}")
        engine = Engine(
            prof,
            spec,
            EngineConfig(
                max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens,
                max_model_len=args.max_model_len,
                kv_capacity_tokens=args.kv_cache_tokens,
                seed=args.seed,
                # a dialect whose requests ask for their drafts: every request's are counted
                per_request_spec_decode_metrics=(
                    "summary" if alone and spec is not None else args.per_request_spec_decode_metrics
                ),
                enable_prefix_caching=args.enable_prefix_caching,
                reasoning=args.reasoning_parser is not None,
                tool_calls=args.enable_auto_tool_choice,
                step_log=args.step_log is not None,
            ),
            trace_sink=_trace_writer(args.acceptance_traces) if args.acceptance_traces else None,
        )
        if args.tokenizer == "model" and not (Path(args.model) / "tokenizer.json").is_file():
            engine.notes.append(
                f"--tokenizer model: {args.model} has no tokenizer.json here (a local model not made yet: "
                "python -m servers.localmodels); prompts are counted in the emulator's words"
            )
        elif args.tokenizer:
            engine.tokens = ModelTokens(args.model if args.tokenizer == "model" else args.tokenizer)
    except (profiles.ProfileError, SpecError, EngineError, ValueError) as e:
        raise ValueError(str(e)) from None
    except OSError as e:
        raise ValueError(f"cannot write --acceptance-traces {args.acceptance_traces!r}: {e.strerror or e}") from None
    for note in engine.notes:
        log.warning("%s", note)
    if args.tensor_parallel_size != prof.tensor_parallel_size:
        log.warning(
            "--tensor-parallel-size %d, but profile %s models tensor parallel %d; its timings are for that",
            args.tensor_parallel_size,
            name,
            prof.tensor_parallel_size,
        )
    return engine, args.served_model_name or [args.model]


def _asked_per_request(flavor: str) -> bool:
    """Whether the dialect gives a request's SD details when the request asks (SGLang's), not
    on a server flag (vLLM's)."""
    sd = engines.dialect(flavor).request_sd
    return sd is not None and sd.alone


def _trace_writer(path: str):
    f = open(path, "a", buffering=1)  # a line per finished request, flushed as written

    def write(trace: dict) -> None:
        f.write(json.dumps(trace, separators=(",", ":")) + "\n")

    return write


def _log_file(path: str | None, flag: str):
    if path is None:
        return None
    try:
        return open(path, "a")  # noqa: SIM115  # open while the server runs
    except OSError as e:
        _fail(f"cannot write {flag} {path!r}: {e.strerror or e}")


async def _serve(args, engine: Engine, served: list[str]) -> None:
    driver = RealtimeDriver(engine, time_scale=args.time_scale)
    dialect = engines.dialect(args.flavor)
    collector = collector_for(
        dialect.metrics,
        lambda: engine.stats,
        served[0],
        engine.spec.k if engine.spec else None,
        vllm_metrics=not args.disable_log_stats,
    )
    api = EmulatorAPI(
        driver,
        served,
        args.model,
        registry(collector),
        api_key=args.api_key,
        crash_after=args.exit_after_requests,
        log_requests=args.enable_log_requests,
        max_log_len=args.max_log_len,
        chunk_log=_log_file(args.chunk_log, "--chunk-log"),
        step_log=_log_file(args.step_log, "--step-log"),
        stream_interval=args.stream_interval,
        dialect=dialect,
    )
    try:
        listener = await serve(api.handle, args.host, args.port, args.send_buffer)
    except OSError as e:
        _fail(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    log.info(
        "serving %s as %s on profile %s, %s",
        args.model,
        ", ".join(served),
        engine.profile.name,
        engine.spec.label if engine.spec else "no speculative decoding",
    )
    runner = asyncio.get_running_loop().create_task(driver.run())
    await announce_and_wait(listener, args.host)
    runner.cancel()
    driver.close()


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args, unknown = _parser().parse_known_args(argv)
    if unknown:
        log.info("ignoring vLLM flags the emulator does not model: %s", " ".join(unknown))
    engine, served = build(args)
    asyncio.run(_serve(args, engine, served))


if __name__ == "__main__":
    main()
