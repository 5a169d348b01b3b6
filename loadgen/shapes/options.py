"""A load shape from the load options of `loadgen run` / `check` / `simulate`, by their names;
a wrong combination or value is a LoadgenError naming the option."""
from __future__ import annotations

from loadgen.errors import LoadgenError, flagged
from loadgen.shapes.base import Shape
from loadgen.shapes.closed import ClosedLoop
from loadgen.shapes.open import OpenLoop
from loadgen.shapes.ramp import Ramp, parse_ramp

OPTIONS = ("max_concurrency", "concurrency", "rate", "burstiness")  # the shapes' fields, by flag


def from_options(concurrency: int | None = None, rate: float | None = None, ramp: str | None = None,
                 arrival: str | None = None, burstiness: float | None = None,
                 max_concurrency: int | None = None) -> Shape:
    """--concurrency N (closed loop), --rate R (open loop, with --arrival, --burstiness,
    --max-concurrency) or --ramp [users:|rate:]A:B:S."""
    fields = None
    if ramp is not None:
        if concurrency is not None or rate is not None:
            raise LoadgenError("--ramp is a load of its own: drop --concurrency / --rate")
        try:
            fields = parse_ramp(ramp)
        except ValueError as e:
            raise LoadgenError("--" + str(e)) from None
        if fields["of"] == "users" and (arrival or burstiness is not None or max_concurrency):
            raise LoadgenError("--arrival, --burstiness and --max-concurrency apply to a rate ramp "
                               "(--ramp rate:A:B:S) only")
    elif (concurrency is None) == (rate is None):
        raise LoadgenError("give exactly one of --concurrency N (closed loop) and --rate R (open loop)")
    if concurrency is not None and (arrival or burstiness is not None or max_concurrency):
        raise LoadgenError("--arrival, --burstiness and --max-concurrency apply to --rate only")
    process = arrival or ("gamma" if burstiness is not None else "poisson")
    if burstiness is not None and process != "gamma":
        raise LoadgenError(f"--burstiness applies to gamma arrivals, not --arrival {process}")
    gaps = {"arrival": process, "burstiness": 1.0 if burstiness is None else burstiness,
            "max_concurrency": max_concurrency}
    try:
        if fields is not None:
            return Ramp(**fields) if fields["of"] == "users" else Ramp(**fields, **gaps)
        return ClosedLoop(concurrency) if concurrency is not None else OpenLoop(rate, **gaps)
    except ValueError as e:
        raise LoadgenError(flagged(str(e), OPTIONS)) from None
