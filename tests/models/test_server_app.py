"""The server app in-process (`create_app` + Starlette's TestClient, lifespan included) on SmolLM2:
what is awkward to provoke through the `openai` client."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from localspec.cli.serve import exposure_warnings
from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.server import create_app
from localspec.server.errors import APIError


@pytest.fixture(scope="module")
def app_client(smollm2_path):
    settings = Settings(target=smollm2_path, n_ctx=512, max_body=2000, temperature=0, parallel=2)
    with TestClient(
        create_app(settings, lambda: Engine(settings)), base_url="http://localhost"
    ) as client:  # runs the lifespan
        yield client


def test_chat_in_process(app_client):
    r = app_client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 5},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] <= 5
    # no draft model: only the lookup may draft (it proposes nothing for a 5-token answer to "Hi")
    assert body["timings"]["draft_n"] == 0
    r = app_client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 5, "lookup": "off"},
    )
    assert r.status_code == 200 and r.json()["timings"]["speculative"] is False  # a request field


def test_chunked_body_over_the_limit_is_413(app_client):
    def chunks():
        yield b'{"prompt": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}'

    r = app_client.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_errors_keep_openai_shape(app_client):
    r = app_client.post("/v1/completions", data={"prompt": "hi"})  # a form, not JSON
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    r = app_client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = app_client.post("/v1/completions", json={"prompt": "hi", "top_p": 0})
    assert r.status_code == 400 and "top_p" in r.json()["error"]["message"]
    r = app_client.post("/v1/completions", json={"prompt": "hi", "localspec": {"colour": True}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "localspec.colour"


def test_serve_defaults_sit_below_flags_and_warnings():
    assert Settings.load(defaults={"parallel": 4}).parallel == 4
    assert Settings.load(defaults={"parallel": 4}, parallel=2).parallel == 2
    assert exposure_warnings("127.0.0.1", "k") == []
    assert any("network" in w for w in exposure_warnings("0.0.0.0", None))
    assert any("no API key" in w for w in exposure_warnings("::1", None))


def test_a_lost_engine_ends_the_requests_in_flight_and_after_with_503(smollm2_path):
    """What server/reload.py does when an rpc-server drops, without one: the dispatcher is told the
    engine is gone while a stream runs (the real failure is tested in test_rpc_serve.py)."""
    settings = Settings(target=smollm2_path, n_ctx=512, temperature=0, parallel=1, n_threads=1)
    lost = APIError(503, "the server lost an rpc-server", type="server_error", code="rpc_server_lost")
    with TestClient(create_app(settings, lambda: Engine(settings)), base_url="http://localhost") as client:
        dispatcher = client.app.state.dispatcher
        body = {"prompt": "Once upon a time", "max_tokens": 400, "stream": True}
        with client.stream("POST", "/v1/completions", json=body) as r:
            events = (line for line in r.iter_lines() if line.startswith("data: "))
            assert '"text"' in next(events)  # generating
            dispatcher.loop.call_soon_threadsafe(dispatcher.fail_all, lost)
            rest = list(events)
        assert json.loads(rest[-1][6:])["error"]["code"] == "rpc_server_lost" and "[DONE]" not in rest[-1]
        r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
        assert dispatcher.load() == (0, 0)
