"""The soak script runs its whole mix (threads, cancels, abandoned streams, greedy cross-checks) on
SmolLM2 drafting for itself, without errors; the 1,000-generation soak is run by hand (see its doc)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_soak_smoke(smollm2_path):
    proc = subprocess.run(
        # three threads, three slots: requests share rounds, cancel and abandon each other's neighbours
        [sys.executable, "tools/soak.py", "--model", str(smollm2_path), "--n", "12", "--threads", "3"]
        + ["--warmup", "2", "--max-tokens", "16", "--samples", "3", "--max-growth-pct", "50"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["errors"] == 0, result["error_examples"]
    assert result["generations"] == 12 and result["tokens"] > 0 and len(result["rss_mb"]["trace"]) >= 2
    assert proc.returncode == 0
