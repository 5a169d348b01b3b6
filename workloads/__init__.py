"""Workloads: the requests a load test sends, as plain data.

`Request` is the one request form every loader and generator produces; `loadgen` turns it into
an HTTP body for the endpoint under test.
"""
from workloads.request import Request
from workloads.synthetic import KINDS, kind_like, random_lengths

__all__ = ["KINDS", "Request", "kind_like", "random_lengths"]
