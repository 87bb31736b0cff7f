"""`localspec doctor`: build + devices with no models, plan/verdict/verified placement with models."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from localspec import llama
from localspec.cli import cli
from localspec.gguf.memory_plan import GiB

from .. import sparse_gguf


def doctor(*args: str) -> str:
    result = CliRunner().invoke(cli, ["doctor", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_no_models_shows_build_and_devices():
    out = doctor()
    assert "llama-cpp-python 0.3.36" in out
    assert "GPU offload: no (CPU-only build)" in out  # this machine's build
    assert "CPU" in out and "free of" in out
    assert llama.system_info().split("|")[0].strip() in out
    assert "none given" in out
    variant = llama.cpu_variant()  # the CPU kernels in use: a DL build's variant, or the one built in
    assert f"kernels    {variant.name} (" in out
    # this checkout's build compiled the sampler's row kernels, for this CPU's vectors
    assert re.search(r"sampler +compiled row kernels \((avx512f|avx2|scalar)\)", out), out


def test_no_models_json():
    r = json.loads(doctor("--json"))
    assert r["gpu_offload"] is False and r["llama_cpp_python"] == "0.3.36"
    (cpu,) = [d for d in r["devices"] if d["kind"] == "cpu"]
    assert cpu["total_bytes"] > 0 and cpu["offloads"] is False
    assert "plan" not in r
    assert r["cpu_variant"]["name"] == llama.cpu_variant().name


def test_real_pair_is_planned_loaded_and_verified(smollm2_path, gemma_path):
    r = json.loads(
        doctor("--target", str(smollm2_path), "--draft", str(gemma_path), "--n-ctx", "2048", "--json")
    )
    assert r["plan"]["n_ctx"] == 2048 and [m["role"] for m in r["plan"]["models"]] == ["target", "draft"]
    assert r["decision"]["mode"] == "cpu" and r["decision"]["banner"].startswith("CPU-only llama.cpp build")
    ver = r["verified"]
    assert ver["n_ctx"] == 512 and ver["problems"] == []
    for m in ver["models"]:
        for what, size in m["sizes"].items():
            assert abs(size["planned"] - size["seen"]) <= 0.10 * size["seen"], (m["role"], what, size)


def test_a_projector_is_planned_and_counted(smollm2_path, mmproj_path):
    args = ("--target", str(smollm2_path), "--no-load")
    alone = json.loads(doctor(*args, "--json"))["plan"]
    r = json.loads(doctor(*args, "--mmproj", str(mmproj_path), "--json"))["plan"]
    pj = r["projector"]
    assert pj["projector_type"] == "mlp" and pj["n_embd_text"] == 576 and pj["image_size"] == 64
    assert 0.5 * mmproj_path.stat().st_size < pj["weights_bytes"] <= mmproj_path.stat().st_size
    assert r["cpu_bytes"] == alone["cpu_bytes"] + pj["weights_bytes"] + pj["compute_bytes"]
    assert "mmproj mmproj-smollm2-test.gguf (mlp, 64 px images): weights" in doctor(
        *args, "--mmproj", str(mmproj_path)
    )


def test_a_drafts_own_projector_is_counted_too(smollm2_path, mmproj_path):
    args = (
        "--target",
        str(smollm2_path),
        "--draft",
        str(smollm2_path),
        "--no-load",
        "--mmproj",
        str(mmproj_path),
    )
    one = json.loads(doctor(*args, "--json"))["plan"]
    two = json.loads(doctor(*args, "--draft-mmproj", str(mmproj_path), "--json"))["plan"]
    dp = two["draft_projector"]
    assert one["draft_projector"] is None and dp["n_embd_text"] == 576
    assert two["cpu_bytes"] == one["cpu_bytes"] + dp["weights_bytes"] + dp["compute_bytes"]
    assert "draft mmproj mmproj-smollm2-test.gguf (mlp" in doctor(*args, "--draft-mmproj", str(mmproj_path))


def test_default_pair_human_table(standin_pair):
    out = doctor("--pair", str(standin_pair.parent))
    for word in ("plan", "verdict", "decision", "verified", "placement: CPU only", "placement as planned"):
        assert word in out
    assert "target" in out and "draft" in out


def test_big_pair_on_a_fake_24gb_card(tmp_path, monkeypatch):
    target = sparse_gguf.qwen25_32b_q4_k_m(tmp_path)
    draft = sparse_gguf.qwen25_05b_q8_0(tmp_path)
    card = llama.Device("CUDA0", "NVIDIA GeForce RTX 4090", "gpu", 24 * GiB, 23 * GiB, "CUDA")
    monkeypatch.setattr(llama, "devices", lambda: [card])
    args = ["--target", str(target), "--draft", str(draft), "--no-load"]
    out = doctor(*args, "--n-ctx", "8192")
    assert "full offload fits" in out and "gpu: n_gpu_layers target 65, draft 25 on CUDA0" in out
    out = doctor(*args, "--n-ctx", "32768")
    assert "REFUSED: full offload does not fit" in out and "--n-ctx 12288" in out
    r = json.loads(doctor(*args, "--n-ctx", "32768", "--allow-partial-offload", "--json"))
    assert r["decision"]["mode"] == "partial" and r["decision"]["target_gpu_layers"] == 53
    assert r["decision"]["verdict"]["fixes"][0]["flags"] == "--n-ctx 12288"


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("nope.gguf", None, "error: no such file:"),
        ("notes.gguf", "not a model", "is not a GGUF file"),
    ],
)
def test_bad_input_is_one_clean_error(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    main = "from localspec.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", main, "doctor", "--target", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
