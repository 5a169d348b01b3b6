"""The load in virtual time: the emulator's engine serves the schedule with no client and no
server (`virtual.py`), producing the same records as a real run; `job.py` is `loadgen
simulate` as a library job (`loadgen.api.simulate`)."""

CLIENT_RTT_S = 0.0003  # a response's end to the next request at the engine, over loopback (docs/emulator.md)
