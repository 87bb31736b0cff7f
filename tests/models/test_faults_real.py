"""One bad request hurts no one else (issue #28, findings 1 and 3) on a real model (SmolLM2 drafting
for itself): ids outside the vocabulary are refused before they reach a batch, and a fault injected
in a stage of one request (its decode, its admission, its delivery, its end) fails that request
alone - the request beside it finishes with the output it has alone, the slots come back and the
engine goes on serving. In-process server: such a failure is a 500 `server_error`, counted."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.engine.request import Request
from localspec.errors import GenerationFailed, LocalspecError
from localspec.server import create_app

from ..helpers import metric_samples, teacher_forced_gaps

STORY = "Tell me a long story about a lighthouse keeper and his cat."
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def eng(smollm2_path):
    s = Settings.load(
        target=smollm2_path, draft=smollm2_path, n_ctx=384, parallel=2, draft_max="3", no_log=True
    )
    with Engine(s) as e:
        yield e


def run(handle):
    """Drain a handle on a thread; returns a function giving (response, error) once it ended."""
    box: dict = {}

    def drain():
        try:
            for _ in handle:
                pass
            box["resp"] = handle.response
        except Exception as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=drain)
    t.start()

    def result(timeout=600):
        t.join(timeout)
        assert not t.is_alive(), "the request never ended"
        return box.get("resp"), box.get("error")

    return result


def alone(eng, prompt, **kw):
    return eng.generate(prompt, chat=True, temperature=0, **kw).tokens


def as_alone(eng, resp, expected):
    """The output it has alone, or within the kernels' noise of the target's argmax when its prompt
    shared a decode with another (llama.cpp is not batch-invariant; see test_engine_batch)."""
    if resp.tokens == expected:
        return True
    return teacher_forced_gaps(eng, resp.prompt_tokens, resp.tokens).max() <= 0.6


def slots_free(eng):
    return eng.on_engine_thread(lambda: sorted(eng._sched.free)) == list(range(eng.settings.parallel))


def test_ids_outside_the_vocabulary_are_refused_before_they_reach_a_batch(eng):
    expected = alone(eng, STORY, max_tokens=16)
    beside = eng.submit(STORY, chat=True, temperature=0, max_tokens=16)
    done = run(beside)
    for ids, shown in (([1, 2, 10**8], "100000000"), ([1, -3], "-3"), ([1, eng.target.n_vocab], "49152")):
        with pytest.raises(LocalspecError, match=shown):
            eng.submit(ids, max_tokens=4)
    resp, error = done()
    assert error is None and resp.tokens == expected
    assert slots_free(eng)


def _fail_decodes(ctx, fails):
    """Every target decode whose items `fails` says fail raises, as llama.cpp fails a batch: through
    eval_batch and eval_views alike (the round decodes through the views). Returns the undo."""
    real = {name: getattr(ctx, name) for name in ("eval_batch", "eval_views") if hasattr(ctx, name)}

    def wrap(fn):
        def decode(items):
            if fails(items):
                raise LocalspecError("llama_decode failed (code -1)")
            return fn(items)

        return decode

    for name, fn in real.items():
        setattr(ctx, name, wrap(fn))
    return lambda: [delattr(ctx, name) for name in real]


def _poison(eng, victim, *, while_prefilling):
    """The victim's rows make every target decode that holds them fail."""

    def fails(items):
        mine = {
            st.seq for job, st, pre in eng._sched.running if job is victim._req and pre == while_prefilling
        }
        return any(seq in mine for seq, *_ in items)

    return _fail_decodes(eng.target_ctx, fails)


@pytest.mark.parametrize("while_prefilling", [True, False], ids=["prefill", "round"])
def test_a_decode_that_fails_fails_only_its_request(eng, while_prefilling):
    expected = alone(eng, STORY, max_tokens=16)
    beside = eng.submit(STORY, chat=True, temperature=0, max_tokens=16)
    victim = eng.submit(QUESTION, chat=True, temperature=0, max_tokens=16)
    undo = _poison(eng, victim, while_prefilling=while_prefilling)
    try:
        done_beside, done_victim = run(beside), run(victim)
        resp, error = done_victim()
        assert resp is None and isinstance(error, GenerationFailed) and "llama_decode failed" in str(error)
        resp, error = done_beside()
        assert error is None and as_alone(eng, resp, expected)
    finally:
        undo()
    assert slots_free(eng)
    assert alone(eng, QUESTION, max_tokens=8)  # and the engine serves on


def test_a_cache_that_cannot_be_cut_part_way_is_prefilled_whole(eng):
    """A recurrent model's cache refuses partial removal: the next request sharing a prefix gets a
    full prefill, not an engine stuck with a request that never ends and a slot that never returns."""
    ctx = eng.target_ctx
    real = ctx.truncate
    refused = []

    def truncate(pos, seq=0):
        if 0 < pos < ctx.past(seq):
            refused.append(pos)
            raise LocalspecError(f"this model's cache cannot be rolled back to position {pos}")
        real(pos, seq)

    first = alone(eng, QUESTION, max_tokens=12, spec=False)
    ctx.truncate = truncate
    try:
        again = run(
            eng.submit(QUESTION + " And of Spain?", chat=True, temperature=0, max_tokens=12, spec=False)
        )
        resp, error = again()
    finally:
        del ctx.truncate
    assert error is None and resp.tokens and refused
    assert alone(eng, QUESTION, max_tokens=12, spec=False) and first
    assert slots_free(eng)


@pytest.mark.parametrize("stage", ["deliver", "end"])
def test_a_request_whose_own_stage_raises_fails_alone(eng, stage, monkeypatch):
    real = getattr(Request, stage)

    def boom(self, *args):
        if self.prompt == victim_ids:
            raise RuntimeError(f"{stage} failed")
        return real(self, *args)

    victim_ids = eng.tokenize([{"role": "user", "content": QUESTION}])
    monkeypatch.setattr(Request, stage, boom)
    expected = alone(eng, STORY, max_tokens=16)
    done_beside = run(eng.submit(STORY, chat=True, temperature=0, max_tokens=16))
    done_victim = run(eng.submit(QUESTION, chat=True, temperature=0, max_tokens=16))
    resp, error = done_victim()
    assert resp is None and isinstance(error, GenerationFailed) and f"{stage} failed" in str(error)
    resp, error = done_beside()
    assert error is None and as_alone(eng, resp, expected)
    assert slots_free(eng)


def test_a_failed_generation_is_a_500_server_error_and_counted(smollm2_path):
    settings = Settings(target=smollm2_path, n_ctx=384, temperature=0, parallel=2, no_log=True)
    with TestClient(create_app(settings, lambda: Engine(settings)), base_url="http://localhost") as client:
        engine = client.app.state.dispatcher.engine
        undo = _fail_decodes(engine.target_ctx, lambda items: True)
        try:
            r = client.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 8})
            assert r.status_code == 500, r.text
            err = r.json()["error"]
            assert err["type"] == "server_error" and "llama_decode failed" in err["message"]
            body = {"prompt": "Once upon a time", "max_tokens": 8, "stream": True}
            with client.stream("POST", "/v1/completions", json=body) as r:
                last = [line for line in r.iter_lines() if line.startswith("data: ")][-1]
            assert '"server_error"' in last and "llama_decode failed" in last
        finally:
            undo()
        metrics = metric_samples(client.get("/metrics").text)
        assert metrics["localspec:requests_failed_total"] == 2.0
        assert metrics["localspec:requests_cancelled_total"] == 0.0
        r = client.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 4})
        assert r.status_code == 200
