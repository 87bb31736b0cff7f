"""The acceptance log written by real runs, `localspec stats` on it, and a log that cannot be written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from localspec.config.settings import Settings
from localspec.decode.stats import Counters, Stats
from localspec.telemetry.acclog import AccLog, log_path

ROOT = Path(__file__).resolve().parents[2]


def localspec(*args: str, state: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_DEBUG"}
    env["XDG_STATE_HOME"] = str(state)  # where the log goes by default (platformdirs)
    return subprocess.run(
        [sys.executable, "-m", "localspec", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


def test_runs_log_and_stats_summarize_and_plot(tmp_path, smollm2_path):
    model = str(smollm2_path)
    common = [
        "Write a haiku about the sea.",
        "--chat",
        "--target",
        model,
        "--temperature",
        "0",
        "--max-tokens",
        "24",
    ]
    # a fixed K: with auto, a draft as big as its target is rightly not used at all
    spec = localspec("run", *common, "--draft", model, "--draft-max", "3", "--trace", state=tmp_path)
    plain = localspec("run", *common, "--no-spec", state=tmp_path)
    assert spec.returncode == 0 and plain.returncode == 0, spec.stderr + plain.stderr
    log = tmp_path / "localspec" / "acceptance.jsonl"
    first, second = [json.loads(line) for line in log.read_text().splitlines()]
    assert first["source"] == "run" and first["target"]["size"] == smollm2_path.stat().st_size
    assert first["draft"]["head"] == first["target"]["head"] and second["draft"] is None
    assert first["stats"]["n_drafted"] > 0 and first["settings"]["temperature"] == 0
    rounds = first["rounds"]  # --trace: one record per round
    assert len(rounds) == len(first["stats"]["k_history"])
    assert sum(r["accepted"] for r in rounds) == first["stats"]["n_accepted"]
    assert {"k", "drafted", "accepted", "draft_ms", "verify_ms"} <= set(rounds[0]) and "rounds" not in second

    png = tmp_path / "acc.png"
    proc = localspec("stats", "--plot", str(png), state=tmp_path)  # the default log
    assert proc.returncode == 0, proc.stderr
    for needle in ("2 generations", "acceptance", "acceptance by draft position", "verify/draft", "tok/s"):
        assert needle in proc.stdout, proc.stdout
    accepted, drafted = first["stats"]["n_accepted"], first["stats"]["n_drafted"]
    assert f"({accepted}/{drafted})" in proc.stdout
    import matplotlib.image

    img = matplotlib.image.imread(png)
    assert img.shape[0] > 200 and img.shape[1] > 400


def test_unwritable_log_warns_once_and_the_answer_completes(tmp_path, smollm2_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = localspec(
        "run", "Name three colors.", "--chat", "--target", str(smollm2_path), "--temperature", "0",
        "--max-tokens", "16", "--log", str(blocker / "log.jsonl"), state=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "acceptance log" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("warning:"), proc.stderr


class _Response:
    finish_reason, seed = "stop", 1
    stats = Stats.build(Counters(), speculative=False, n_prompt=3, n_generated=2, decode_s=0.1, total_s=0.2)


def test_writer_warns_once_and_no_log_writes_nothing(tmp_path):
    warned: list[str] = []
    blocked = tmp_path / "f"
    blocked.write_text("")
    s = Settings(log=blocked / "x.jsonl")
    log = AccLog(s, source="test", warn=warned.append)
    for _ in range(3):
        log.write(_Response(), s, started=0.0)
    assert len(warned) == 1
    off = Settings(log=tmp_path / "y.jsonl", no_log=True)
    assert log_path(off) is None
    AccLog(off, source="test").write(_Response(), off, started=0.0)
    assert not (tmp_path / "y.jsonl").exists()
    ok = Settings(log=tmp_path / "z.jsonl")
    AccLog(ok, source="test").write(_Response(), ok, started=0.0)
    assert json.loads((tmp_path / "z.jsonl").read_text())["stats"]["n_generated"] == 2
