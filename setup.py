"""The package's one compiled part: loadgen/client/_hotpath.c, the client's read path
(docs/performance.md). Optional: where no C compiler is found (or not on Linux) the install
goes on without it and the client takes its pure-Python path (loadgen/client/stream.py).
LOADGEN_REQUIRE_COMPILED=1 (as .ci/run sets) makes it required: a C file that stops compiling
fails the install instead of going unnoticed."""

import os
import sys

from setuptools import Extension, setup

required = os.environ.get("LOADGEN_REQUIRE_COMPILED") == "1"
ext = Extension(
    "loadgen.client._hotpath", ["loadgen/client/_hotpath.c"], optional=not required, extra_compile_args=["-O2"]
)
setup(ext_modules=[ext] if sys.platform.startswith("linux") else [])
