"""Workloads: the requests a load test sends, as plain data.

`Request` is the one request form every loader and generator produces; `loadgen` turns it into
an HTTP body for the endpoint under test.
"""
from workloads.request import Request
from workloads.synthetic import random_lengths

__all__ = ["Request", "random_lengths"]
