"""`python3 -m servers.localmodels [NAME ...]`: make the named local models now (all of them
without a name), rather than at a server's first start; each line says where it is and whether
it was made or already fresh. `--list` says what is made, without making anything."""

from __future__ import annotations

import sys
import time

from servers import localmodels


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    listing = "--list" in args
    names = [a.removeprefix(localmodels.PREFIX) for a in args if a != "--list"] or list(localmodels.MODELS)
    unknown = [n for n in names if n not in localmodels.MODELS or n.startswith("-")]
    if unknown:
        print(
            f"loadgen: error: no local model {unknown[0]!r}: give one of {', '.join(localmodels.MODELS)}",
            file=sys.stderr,
        )
        return 2
    for name in names:
        value, r = localmodels.PREFIX + name, localmodels.MODELS[name]
        where = localmodels.directory(value)
        if localmodels.made(value):
            print(f"{name}: fresh in {where} ({r.what})")
        elif listing:
            print(f"{name}: not made ({r.what}; made at the first start that needs it)")
        else:
            t0 = time.monotonic()
            try:
                localmodels.ensure(value)
            except (localmodels.ModelError, OSError) as e:
                print(f"loadgen: error: cannot make {name} in {where}: {e}", file=sys.stderr)
                return 1
            print(f"{name}: made in {where} in {time.monotonic() - t0:.0f} s ({r.what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
