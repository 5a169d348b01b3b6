"""The emulated vLLM engine: continuous batching, a step-time cost model per hardware/model
profile, and speculative decoding as vLLM performs it (drafts proposed, verified in one target
step, a prefix accepted), over an emulated model whose output overlaps its prompt as real
output does. One engine, driven in real time behind vLLM's HTTP API (`loadgen-emulator
serve`) or in virtual time by `loadgen simulate`."""
