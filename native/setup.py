"""The one native module; everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ndjson_arrow._scan",
            sources=["ndjson_arrow/_scan.c"],
            # Glue's workers are x86-64 of several generations: the baseline instruction set, no -march.
            # -g0: no debug info, so the same source builds the same bytes wherever it is built (the
            # deploy names the wheel by its content, and a new name restarts the job)
            extra_compile_args=["-O2", "-g0", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
