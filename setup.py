"""The one compiled part: the sampler's row kernels (localspec/decode/_kernels.c). Optional - where
it cannot build, sampling.py's numpy code (the definition) does the same work more slowly."""

import sys

from setuptools import Extension, setup

# OpenMP (libgomp, which llama.cpp's CPU backend already loads) lets two cores share a call's rows
OPENMP = ["-fopenmp"] if sys.platform.startswith("linux") else []
FLAGS = [] if sys.platform == "win32" else ["-O3", *OPENMP]

setup(
    ext_modules=[
        Extension(
            "localspec.decode._kernels",
            ["localspec/decode/_kernels.c"],
            extra_compile_args=FLAGS,
            extra_link_args=OPENMP,
            optional=True,
        )
    ]
)
