"""The native modules: the NDJSON scanner (and the document framer), the Thrift codec.

Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

# Glue's workers are x86-64 of several generations: the baseline instruction set, no -march.
# -g0: no debug info, so the same source builds the same bytes wherever it is built (the deploy
# names the wheel by its content, and a new name restarts the job)
FLAGS = ["-O2", "-g0", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        Extension(
            f"ndjson_arrow.{name}",
            sources=[f"ndjson_arrow/{name}.c"],
            depends=["ndjson_arrow/scan_core.h", "ndjson_arrow/frame_core.h"],
            extra_compile_args=FLAGS,
        )
        for name in ("_scan", "_thrift")
    ]
)
