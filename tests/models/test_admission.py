"""Admission before any costly work, bounded tokenizing, embeddings that share admission and stop
when their client leaves (issue 60, #2, #3, #4): SmolLM2 in-process (create_app + TestClient), one
slot and no queue, held by a streamed answer that cannot end (its end-of-turn tokens biased out)."""

from __future__ import annotations

import contextlib
import functools
import threading
import time

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.server import create_app
from localspec.serving import plan as chat_plan

HI = [{"role": "user", "content": "Count to a thousand."}]
NO_END = {"0": -100, "1": -100, "2": -100}  # SmolLM2's <|endoftext|>, <|im_start|>, <|im_end|>
MODEL = "SmolLM2-135M-Instruct.Q4_1"
BIG = "lorem ipsum dolor sit amet " * 290_000  # 7.8 MB


@pytest.fixture(scope="module")
def client(smollm2_path):
    settings = Settings(target=smollm2_path, n_ctx=512, parallel=1, max_queue=0, temperature=0,
                        n_threads=1, embed_ctx=64, max_body=9_000_000)  # fmt: skip
    with TestClient(create_app(settings, lambda: Engine(settings)), base_url="http://localhost") as c:
        yield c


@pytest.fixture()
def planned(monkeypatch):
    """The chat plans made (the real plan, counted)."""
    made = []
    real = chat_plan.plan

    def counted(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        made.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(chat_plan, "plan", counted)
    return made


@contextlib.contextmanager
def busy(client):  # noqa: ANN001, ANN201
    """The one place held by a whole answer that cannot end early (the test client has no real
    streams: a streamed body comes once it is all there)."""
    body = {"messages": HI, "max_tokens": 450, "logit_bias": NO_END}
    held = threading.Thread(target=lambda: client.post("/v1/chat/completions", json=body))
    held.start()
    model = client.app.state.dispatcher
    while model.load() == (0, 0):
        time.sleep(0.01)
    try:
        yield
    finally:
        held.join()


def test_past_slots_and_queue_every_kind_of_request_is_a_503_before_any_costly_step(client, planned):
    asks = {
        "/v1/chat/completions": {"messages": [{"role": "user", "content": BIG[:100_000]}]},
        "/v1/messages/count_tokens": {"model": "x", "messages": [{"role": "user", "content": "hi"}]},
        "/v1/embeddings": {"input": ["hi"] * 8},
        "/api/embed": {"model": MODEL, "input": "hi"},
    }
    with busy(client):
        before = len(planned)
        for path, body in asks.items():
            t0 = time.monotonic()
            r = client.post(path, json=body)
            assert r.status_code == 503 and "Retry-After" in r.headers, (path, r.text[:200])
            assert time.monotonic() - t0 < 1.0, path
        assert len(planned) == before  # nothing rendered, tokenized or decoded for them
        assert client.app.state.dispatcher.load() == (1, 0)  # still held: the checks ran while it was
    r = client.post("/v1/messages/count_tokens", json=asks["/v1/messages/count_tokens"])
    assert r.status_code == 200 and r.json()["input_tokens"] > 0  # the place is free again


def test_a_prompt_past_what_the_context_could_hold_is_refused_before_it_is_tokenized(client, planned):
    t0 = time.monotonic()
    r = client.post(
        "/v1/messages/count_tokens", json={"model": "x", "messages": [{"role": "user", "content": BIG}]}
    )
    assert r.status_code == 400 and "characters" in r.json()["error"]["message"], r.text[:300]
    r = client.post("/v1/completions", json={"prompt": BIG, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text[:300]
    assert time.monotonic() - t0 < 5 and not planned


def test_truncate_cuts_the_text_before_it_is_tokenized(client, monkeypatch):
    target = client.app.state.dispatcher.engine.target
    sizes = []
    real = type(target).tokenize

    def measured(self, text, **kw):  # noqa: ANN001, ANN003, ANN202
        sizes.append(len(text))
        return real(self, text, **kw)

    monkeypatch.setattr(type(target), "tokenize", measured)
    r = client.post("/api/embed", json={"model": MODEL, "input": BIG, "truncate": True})
    assert r.status_code == 200 and r.json()["prompt_eval_count"] == 64, r.text[:300]
    assert max(sizes) < 10_000  # a prefix, not 7.8 MB
    r = client.post("/api/embed", json={"model": MODEL, "input": BIG, "truncate": False})
    assert r.status_code == 400 and "characters" in r.json()["error"], r.text[:300]


def test_an_abandoned_embedding_stops_at_its_next_pass(client, monkeypatch):
    model = client.app.state.dispatcher
    engine = model.engine
    passes = []
    real = engine.on_engine_thread
    monkeypatch.setattr(engine, "on_engine_thread", lambda fn, **kw: (passes.append(1), real(fn, **kw))[1])

    async def gone() -> bool:  # the client left once its passes began (tokenizing 2048 inputs: seconds)
        return len(passes) > 0

    inputs = [f"text {i % 10} " * 12 for i in range(2048)]  # one pass each (--embed-ctx 64)
    with pytest.raises(Exception, match="cancelled"):
        client.portal.call(functools.partial(model.embed, inputs, is_disconnected=gone))
    assert 0 < len(passes) < 1000
    assert model.load() == (0, 0)  # its place is given back
