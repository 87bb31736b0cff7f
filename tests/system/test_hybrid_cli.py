"""check-pair and doctor on hybrid and recurrent GGUFs, as a user runs them: each model's memory
kind, how it rolls back and what that costs (measured by doctor), and its MTP layers."""

from __future__ import annotations

import json

import pytest

from tools.synthetic.arch import Qwen35Shape, write_mamba, write_qwen35

from ..helpers import localspec


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory, smollm2_path):
    d = tmp_path_factory.mktemp("hybrid-cli")
    write_qwen35(smollm2_path, d / "qwen35.gguf", shape=Qwen35Shape(nextn=1))
    write_mamba(smollm2_path, d / "mamba.gguf")
    return d


def test_check_pair_and_doctor_say_memory_kind_and_mtp_layers(hybrid_dir, smollm2_path):
    out = localspec("check-pair", str(hybrid_dir / "qwen35.gguf"), str(smollm2_path))
    assert out.returncode == 0, out.stderr
    assert "target: hybrid memory (qwen35)" in out.stdout and "1 MTP layer(s)" in out.stdout
    assert "draft: attention memory (llama)" in out.stdout
    out = localspec(
        "doctor",
        "--json",
        "--target",
        str(hybrid_dir / "qwen35.gguf"),
        "--draft",
        str(hybrid_dir / "mamba.gguf"),
    )
    assert out.returncode == 0, out.stderr
    memory = json.loads(out.stdout)["memory"]
    assert memory["target"]["kind"] == "hybrid" and memory["target"]["mtp_layers"] == 1
    assert memory["target"]["loaded_kind"] == "hybrid" and memory["target"]["rollback"] == "rs"
    assert memory["draft"]["rollback"] == "snapshot" and memory["draft"]["state_bytes"] > 0
    assert memory["target"]["rollback_ms"] >= 0 and memory["draft"]["snapshot_ms"] > 0
    plan = {m["role"]: m for m in json.loads(out.stdout)["plan"]["models"]}
    assert plan["target"]["state_cells"] > plan["draft"]["state_cells"] > 0  # rs keeps 1 + n_rs_seq
    assert plan["draft"]["snapshot_bytes"] > 0 and plan["target"]["snapshot_bytes"] == 0


def test_run_draft_mtp_needs_no_draft_file(hybrid_dir, smollm2_path):
    q35 = str(hybrid_dir / "qwen35.gguf")
    out = localspec(
        "run", "--target", q35, "--draft", "mtp", "--temperature", "0", "--max-tokens", "12", "Hi"
    )
    assert out.returncode == 0, out.stderr
    assert "acceptance" in out.stderr and "target memory: hybrid, rollback by rs" in out.stderr
    out = localspec("run", "--target", str(smollm2_path), "--draft", "mtp", "--max-tokens", "4", "Hi")
    assert out.returncode == 1 and "has no MTP layers" in out.stderr and "Traceback" not in out.stderr
