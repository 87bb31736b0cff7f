"""tools/gpu_check.sh --cpu: the GPU check's every step on this CPU, with a tiny synthetic pair.

The same script runs on the GPU machine (docs/gpu.md); here it proves the steps run and report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import gpu_bundle

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cpu_check_runs_every_step(tmp_path):
    env = os.environ | {"OUT": str(tmp_path), "PYTHON": sys.executable}
    p = subprocess.run(
        ["bash", "tools/gpu_check.sh", "--cpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = result["steps"]
    assert list(steps) == ["machine", "pair", "doctor", "tests", "bench", "verify_cost", "concurrency"]
    assert all(s["ok"] for s in steps.values()), steps
    assert steps["doctor"]["decision"]["mode"] == "cpu"
    assert not steps["doctor"]["verified"]["problems"]
    tables = steps["bench"]["tables"]
    assert [t["temperature"] for t in tables] == [0.0, 0.8]
    for t in tables:
        configs = [r["config"] for r in t["rows"]]
        assert configs == ["plain", "K=1", "K=2", "K=4", "K=8", "auto"], configs
        assert all(r["tok_s"] > 0 for r in t["rows"])
        assert t["best_k"] in ("1", "2", "4", "8") and t["auto_k_counts"]
    curve = steps["verify_cost"]["target"]
    assert set(curve) == {"1", "2", "4", "8"} and all(ms > 0 for ms in curve.values())
    report = (tmp_path / "report.md").read_text()
    assert "CPU (`--cpu`: tiny synthetic pair - not GPU figures)" in report
    assert "| K=8 |" in report and "Verify cost by batch size" in report
    assert (tmp_path / "bench.json").exists() and (tmp_path / "doctor.txt").exists()


def test_bundle_keeps_what_the_cuda_build_reads():
    keep = gpu_bundle.keep
    assert keep("vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu")
    assert keep("vendor/llama.cpp/ggml/src/ggml-cuda/template-instances/mmq-instance-q4_k.cu")
    assert keep("vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c")
    assert keep("vendor/llama.cpp/ggml/src/ggml.c") and keep("vendor/llama.cpp/src/llama.cpp")
    assert keep("llama_cpp/llama_cpp.py") and keep("CMakeLists.txt")
    assert keep("vendor/llama.cpp/vendor/miniaudio/CMakeLists.txt")  # add_subdirectory'd, header unused
    for dropped in (
        "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
        "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf",
        "vendor/llama.cpp/docs/build.md",
        "vendor/llama.cpp/tools/mtmd/mtmd.cpp",
        "vendor/llama.cpp/vendor/miniaudio/miniaudio.h",
        "vendor/llama.cpp/tests/test-backend-ops.cpp",
    ):
        assert not keep(dropped), dropped
