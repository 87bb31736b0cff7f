"""Calibration at load on a real model, remembered across engines."""

from __future__ import annotations

import json

from localspec.config.settings import Settings
from localspec.draft_len.auto import AutoK
from localspec.draft_len.controller import Facts


def test_engine_calibrates_once_then_remembers(smollm2_path, tmp_path, monkeypatch):
    from localspec.draft_len import calibrate
    from localspec.engine import Engine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    real = calibrate.measure
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: calls.append(1) or real(*a, **k))
    s = Settings.load(target=smollm2_path, draft=smollm2_path, temperature=0.0, max_tokens=12, n_ctx=256)
    with Engine(s) as eng:
        assert eng.calibration == "measured" and len(calls) == 1
        assert 0 < eng.tuners.known.catch_s < eng.tuners.known.draft_s  # a batched pass: cheaper a token
        predicted = AutoK()
        predicted.prime(eng.tuners.known.verify_s, eng.tuners.known.draft_s)
        predicted = predicted.fork()
        r = eng.generate("The capital of France is")
        # no probe rounds: the first round runs at the K the measured costs predict (0: plain)
        assert r.stats.k_history[0] == predicted.plan(Facts()).k
        assert r.stats.started_plain == (r.stats.k_history[0] == 0)
    files = list((tmp_path / "localspec" / "tuner").glob("*.json"))
    assert len(files) == 1
    with Engine(s) as eng:  # a new process on the same pair, build and device
        assert eng.calibration == "remembered" and len(calls) == 1
        assert eng.generate("The capital of France is").text == r.text
    with Engine(s.replace(tuner_cache=False)) as eng:
        assert eng.calibration == "measured" and len(calls) == 2
    with Engine(s.replace(draft_max="3")) as eng:  # a fixed K needs no costs
        assert eng.calibration == "none" and len(calls) == 2
    from click.testing import CliRunner

    from localspec.cli import cli

    args = [
        "doctor",
        "--target",
        str(smollm2_path),
        "--draft",
        str(smollm2_path),
        "--n-ctx",
        "256",
        "--no-load",
    ]
    r = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    tm = json.loads(r.output)["tuner_memory"]
    assert tm["path"] == str(files[0]) and tm["verify_ms"]["1"] > 0 and tm["draft_ms_per_token"] > 0
    assert 0 < tm["catch_up_ms_per_token"] < tm["draft_ms_per_token"]
    text = CliRunner().invoke(cli, args, catch_exceptions=False).output
    assert "auto-K" in text and "remembered" in text and "verify ms by batch: 1:" in text


def test_engine_with_slots_calibrates_the_batch_of_a_full_round(smollm2_path, tmp_path, monkeypatch):
    from localspec.engine import Engine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    s = Settings.load(target=smollm2_path, draft=smollm2_path, n_ctx=256, parallel=4, n_threads=1)
    with Engine(s) as eng:
        assert eng.calibration == "measured" and {4, 8} <= set(eng.tuners.known.verify_s)
