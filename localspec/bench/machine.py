"""What a benchmark ran on: numbers mean little without the CPU, the llama.cpp build and the load."""

from __future__ import annotations

import os
import platform
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from localspec import paths
from localspec.draft_len.memory import cpu_name


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def peer_build_flags(bin_dir: Path | None = None) -> dict[str, str]:
    """The cmake flags of the llama.cpp peer build that matter for speed (from its CMakeCache)."""
    cache = (bin_dir or paths.peer_bin()).parent / "CMakeCache.txt"
    if not cache.exists():
        return {}
    want = re.compile(
        r"^(CMAKE_BUILD_TYPE|CMAKE_C_FLAGS|BUILD_SHARED_LIBS|GGML_NATIVE|GGML_BACKEND_DL|GGML_CPU_ALL_VARIANTS"
        r"|GGML_AVX\w*|GGML_FMA|GGML_F16C|GGML_BMI2|GGML_OPENMP)"
        r":\w+=(.*)$"
    )
    return {m.group(1): m.group(2) for m in map(want.match, cache.read_text().splitlines()) if m}


def describe() -> dict[str, Any]:
    import psutil  # noqa: PLC0415

    from localspec import llama  # noqa: PLC0415

    return {
        "cpu": cpu_name(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "llama_cpp_system_info": llama.system_info(),
        "cpu_kernels": llama.cpu_variant().name,
        "versions": {
            "localspec": _version("localspec"),
            "llama-cpp-python": _version("llama-cpp-python"),
            "python": platform.python_version(),
            "numpy": _version("numpy"),
        },
        "peer_build_flags": peer_build_flags(),
    }
