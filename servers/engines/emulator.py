"""The emulated engine (servers/emulator): vLLM's command line, served by `python -m
servers.emulator serve` with the same flags plus the deployment's emulator_args; no GPU needed.
It answers in vLLM's dialect, or in another engine's (`--flavor NAME`, which that engine's
`emulated` adds), and exports its check on itself beside it (`emulator:`,
servers/emulator/realtime.py, in emulated seconds): a dialect of its own, for metrics only."""

from __future__ import annotations

import sys

from servers.deploy.model import Deployment, Launch
from servers.engines import vllm
from servers.engines.base import Base, register
from servers.engines.dialect import Dialect, Metrics, speak

METRICS = Metrics(
    counters={
        "emulator_modeled": ("emulator:modeled_seconds_total",),  # modeled time of the steps run
        "emulator_lost": ("emulator:lost_seconds_total",),  # lost where its schedule restarted late
    },
    gauges={
        "emulator_slowdown": ("emulator:slowdown",),  # actual / modeled step time
        "emulator_time_scale": ("emulator:time_scale",),  # real s per modeled s
    },
    histograms={"emulator_step_lag": ("emulator:step_lag_seconds",)},  # chunks late
)
STARTUP_TIMEOUT_S = 60.0
# its check on itself, beside whichever dialect it answers in: not one the emulator is asked for
SELF_CHECK = speak(Dialect("emulator-self-check", metrics=METRICS, emulable=False))


@register
class Emulator(Base):
    name = "emulator"
    tool = "loadgen-emulator"
    dialect = vllm.DIALECT.name  # unless --flavor says another (an engine's `emulated`)
    embedded = True
    emulates = True

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None) -> Launch:
        argv = (sys.executable, "-m", "servers.emulator", "serve", *vllm.flags(dep, v, port, host), *dep.emulator_args)
        return Launch(
            dep.name,
            v.name,
            self.name,
            argv,
            {"CUDA_VISIBLE_DEVICES": ",".join(map(str, vllm.gpus_for(dep, gpus)))},
            f"http://{host}:{port}",
            dep.served_model_name,
            STARTUP_TIMEOUT_S,
        )

    def emulated(self, dep: Deployment) -> Deployment:
        return dep
