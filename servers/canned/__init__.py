"""A canned-chunk server: the fastest stream a client can be given, for client benchmarks."""

from servers.canned.app import CannedOptions, CannedServer

__all__ = ["CannedOptions", "CannedServer"]
