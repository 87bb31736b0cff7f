"""`localspec run` end to end, and the bad-input policy: one clear line, non-zero exit, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import localspec, png

ROOT = Path(__file__).resolve().parents[2]


def assert_clean_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "Segmentation" not in proc.stderr
    # startup lines (placement, the CPU-only banner) may come first; the error itself is one line
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for n in needles:
        assert n in errors[0], proc.stderr


def test_run_json_greedy_is_valid_and_repeatable(smollm2_path):
    args = [
        "run",
        "Write a haiku about the sea.",
        "--target",
        str(smollm2_path),
        "--max-tokens",
        "32",
        "--temperature",
        "0",
        "--chat",
        "--json",
    ]
    a, b = localspec(*args), localspec(*args)
    assert a.returncode == 0, a.stderr
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    for key in ("text", "tokens", "n_prompt_tokens", "n_generated", "decode_tok_s", "prefill_ms", "stats"):
        assert key in da
    assert da["tokens"] == db["tokens"] and da["text"].strip()
    assert da["n_generated"] >= len(da["tokens"]) and da["decode_tok_s"] > 0


def test_run_seeded_sampling_cli(smollm2_path):
    base = [
        "run",
        "Write a haiku about the sea.",
        "--target",
        str(smollm2_path),
        "--max-tokens",
        "24",
        "--temperature",
        "0.8",
        "--chat",
        "--json",
    ]
    s7a = json.loads(localspec(*base, "--seed", "7").stdout)["tokens"]
    s7b = json.loads(localspec(*base, "--seed", "7").stdout)["tokens"]
    s9 = json.loads(localspec(*base, "--seed", "9").stdout)["tokens"]
    assert s7a == s7b and s7a != s9


def test_missing_file():
    assert_clean_error(localspec("run", "hi", "--target", "models/nope.gguf"), "no such file", "nope.gguf")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_text("this is not a model\n" * 10)
    assert_clean_error(localspec("run", "hi", "--target", str(bad)), "not a GGUF file")


def test_truncated_gguf(tmp_path, smollm2_path):
    cut = tmp_path / "cut.gguf"
    with smollm2_path.open("rb") as f:
        cut.write_bytes(f.read(30_000_000))
    assert_clean_error(localspec("run", "hi", "--target", str(cut)), "truncated")


def test_header_only_truncation(tmp_path, smollm2_path):
    cut = tmp_path / "cut.gguf"
    with smollm2_path.open("rb") as f:
        cut.write_bytes(f.read(5000))
    assert_clean_error(localspec("run", "hi", "--target", str(cut)), "truncated")


def test_context_smaller_than_prompt(smollm2_path):
    proc = localspec(
        "run", "word " * 400, "--target", str(smollm2_path), "--n-ctx", "256", "--max-tokens", "8"
    )
    assert_clean_error(proc, "n_ctx=256", "prompt (")


def test_negative_temperature(smollm2_path):
    assert_clean_error(
        localspec("run", "hi", "--target", str(smollm2_path), "--temperature", "-1"),
        "temperature must be >= 0",
    )


def test_bad_draft_max(smollm2_path):
    assert_clean_error(
        localspec("run", "hi", "--target", str(smollm2_path), "--draft-max", "lots"), "--draft-max"
    )


def test_missing_pair():
    assert_clean_error(localspec("run", "hi", "--pair", "models/no-such-pair"), "no pair at")


def test_help_does_not_import_heavy_modules():
    # `localspec --help` must be instant: neither numpy nor llama.cpp may load for it
    code = (
        "import sys; from click.testing import CliRunner; from localspec.cli import cli; "
        "r = CliRunner().invoke(cli, ['--help']); assert r.exit_code == 0 and 'run' in r.output; "
        "print(sorted(m for m in ('numpy', 'llama_cpp', 'localspec.engine') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("cmd", ["run", "bench", "doctor", "convert", "pair", "check-pair", "quantize"])
def test_every_command_has_help(cmd):
    proc = localspec(cmd, "--help")
    assert proc.returncode == 0 and "Usage" in proc.stdout, proc.stderr


def test_run_sees_the_image_it_is_given(tmp_path, smollm2_path, mmproj_path):
    for seed in (1, 2):
        (tmp_path / f"{seed}.png").write_bytes(png(seed))
    base = ["run", "What is in this picture?", "--target", str(smollm2_path), "--mmproj", str(mmproj_path),
            "--chat", "--temperature", "0", "--max-tokens", "12", "--json"]  # fmt: skip
    one, two = (localspec(*base, "--image", str(tmp_path / f"{s}.png")) for s in (1, 2))
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert a["text"] != b["text"] and a["n_prompt_tokens"] == b["n_prompt_tokens"]  # 16 rows each
