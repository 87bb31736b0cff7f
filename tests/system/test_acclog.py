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
        log.flush()
    assert len(warned) == 1
    off = Settings(log=tmp_path / "y.jsonl", no_log=True)
    assert log_path(off) is None
    AccLog(off, source="test").write(_Response(), off, started=0.0)
    assert not (tmp_path / "y.jsonl").exists()
    ok = Settings(log=tmp_path / "z.jsonl")
    log = AccLog(ok, source="test")
    log.write(_Response(), ok, started=0.0)
    log.flush()
    assert json.loads((tmp_path / "z.jsonl").read_text())["stats"]["n_generated"] == 2


# -- #48: the log is bounded, written off the request's thread, and read line by line ----------------
def _line(**stats) -> str:
    rec = {"v": 1, "source": "run", "started": "2026-12-01T10:00:00.000+00:00", "settings": {},
           "stats": {"n_generated": 8, "n_drafted": 4, "n_accepted": 3, "rounds": 2, **stats}}  # fmt: skip
    return json.dumps(rec) + "\n"


def test_stats_skips_a_line_of_the_right_shape_with_wrong_types(tmp_path):
    log = tmp_path / "acc.jsonl"
    wrong = [
        {"sources": [1, 2]},  # was AttributeError: 'list' object has no attribute 'items'
        {"sources": {"draft": 5}},
        {"sources": {"draft": {"drafted": "many"}}},
        {"drafted_by_pos": "abc"},
        {"accepted_by_pos": [1, None, "x"]},
        {"n_drafted": "4"},
        {"decode_tok_s": [1]},
        {"n_generated": True},
    ]
    lines = [_line(), *(_line(**w) for w in wrong), '{"stats": {}, "started": 7}\n', _line()]
    log.write_text("".join(lines))
    proc = localspec("stats", str(log), state=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())  # rich wraps lines to the terminal
    assert "2 generations" in out and f"({len(wrong) + 1} line(s) skipped" in out
    assert "internal error" not in proc.stderr + proc.stdout


def test_stats_reads_a_big_log_a_line_at_a_time(tmp_path):
    """200k records and a 16 MB line with no end: counted, never all in memory at once."""
    log = tmp_path / "big.jsonl"
    one = _line(drafted_by_pos=[4, 3, 2, 1], accepted_by_pos=[3, 2, 1, 0], decode_tok_s=20.0)
    with log.open("w") as f:
        for i in range(200_000):
            f.write(one)
            if i == 100_000:
                f.write("[" + "1," * (8 << 20) + "\n")
    small = tmp_path / "small.jsonl"
    small.write_text(one)
    proc, rss_mb = _stats_rss(log)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "200000 generations" in out and "(1 line(s) skipped" in out
    grown = rss_mb - _stats_rss(small)[1]  # over what reading one line costs, in the same conditions
    assert grown < 60, f"{grown} MB more to read a {log.stat().st_size >> 20} MB log"


def _stats_rss(log: Path) -> tuple[subprocess.CompletedProcess, int]:
    """`localspec stats LOG`, and its peak resident memory in MB."""
    code = (
        "import resource, sys\nfrom localspec.cli import main\nsys.argv = ['localspec', 'stats', sys.argv[1]]\n"
        "try:\n    main()\nfinally:\n    print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_DEBUG"}
    proc = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)  # fmt: skip
    return proc, int(proc.stderr.split("maxrss")[1].split()[0]) >> 10
