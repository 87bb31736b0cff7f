"""Ollama's API on the fake engine: what a body becomes (the internal request, its Settings), what
events become as one object and as NDJSON lines, the model calls, and errors in Ollama's shape."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.server import create_app
from localspec.serving import APIError

from ..fake_engine import FakeModel, answer

HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture()
def fake():
    return FakeModel(n_ctx=2048)


@pytest.fixture()
def client(fake):
    with TestClient(create_app(Settings(parallel=4), model=fake), base_url="http://localhost") as c:
        yield c


def lines(r) -> list[dict]:
    assert r.headers["content-type"].startswith("application/x-ndjson"), r.headers
    return [json.loads(x) for x in r.text.splitlines() if x.strip()]


def error(r, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}, body  # Ollama's shape: one string
    return body["error"]


def test_a_chat_body_becomes_the_internal_request(client, fake):
    body = {
        "model": "fake:latest",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": "", "thinking": "Two calls.", "tool_calls": [
                {"function": {"name": "get", "arguments": {"city": "Paris"}}},
                {"function": {"index": 1, "name": "get", "arguments": {"city": "Rome"}}}]},
            {"role": "tool", "content": "sunny", "tool_name": "get"},
            {"role": "tool", "content": "rain", "tool_name": "get"},
        ],
        "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}],
        "format": {"type": "object"}, "think": "high", "stream": False, "keep_alive": "5m",
        "options": {"temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "num_predict": 9, "seed": 3,
                    "stop": ["END"], "repeat_penalty": 1.1, "repeat_last_n": 32, "presence_penalty": 0.5,
                    "frequency_penalty": 0.25, "num_ctx": 2048, "num_gpu": 99, "mirostat": 0,
                    "draft_num_predict": 4},
    }  # fmt: skip
    assert client.post("/api/chat", json=body).status_code == 200
    req, s = fake.requests[-1], fake.settings[-1]
    assert req.model == "fake" and not req.stream and [m.role for m in req.messages] == [
        "system", "user", "assistant", "tool", "tool"]  # fmt: skip
    calls = req.messages[2].tool_calls
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert req.messages[2].reasoning == "Two calls."
    # a tool result without an id answers its turn's calls in order
    assert [m.tool_call_id for m in req.messages[3:]] == [c.id for c in calls]
    assert req.messages[3].name == "get" and [t.name for t in req.tools] == ["get"]
    assert req.reasoning is True and req.template_vars == {"reasoning_effort": "high"}
    assert (s.temperature, s.top_k, s.top_p, s.min_p, s.max_tokens, s.seed, s.stop) == (
        0.0, 5, 0.5, 0.1, 9, 3, ("END",))  # fmt: skip
    assert (s.repeat_penalty, s.repeat_last_n, s.presence_penalty, s.frequency_penalty) == (
        1.1,
        32,
        0.5,
        0.25,
    )
    assert s.draft_max == 4 and json.loads(s.json_schema) == {"type": "object"}


def test_options_that_mean_the_default(client, fake):
    opts = {"num_predict": -1, "seed": -1, "typical_p": 1.0, "penalize_newline": True}
    client.post("/api/chat", json={"model": "fake", "messages": HI, "stream": False, "options": opts})
    assert fake.requests[-1].overrides == {}
    client.post("/api/generate", json={"model": "fake", "prompt": "x", "format": "json", "stream": False})
    assert json.loads(fake.settings[-1].json_schema) == {"type": "object"}


def test_generate_templates_a_turn_or_sends_it_raw(client, fake):
    client.post(
        "/api/generate", json={"model": "fake", "prompt": "Why?", "system": "Be kind.", "stream": False}
    )
    req = fake.requests[-1]
    assert [(m.role, m.content) for m in req.messages] == [("system", "Be kind."), ("user", "Why?")]
    client.post(
        "/api/generate", json={"model": "fake", "prompt": "[INST] hi [/INST]", "raw": True, "stream": False}
    )
    assert fake.requests[-1].prompt == "[INST] hi [/INST]" and fake.requests[-1].chat is False


def test_a_whole_chat_answer(client, fake):
    fake.queue(*answer("Hello", reasoning="Think.", prompt_tokens=4))
    r = client.post("/api/chat", json={"model": "fake", "messages": HI, "stream": False})
    body = r.json()
    assert body["message"] == {"role": "assistant", "content": "Hello", "thinking": "Think."}
    assert body["done"] is True and body["done_reason"] == "stop" and body["model"] == "fake"
    assert body["created_at"].endswith("Z")
    assert (body["prompt_eval_count"], body["eval_count"]) == (4, 5)
    assert body["eval_duration"] == 100_000_000 and body["total_duration"] > 0  # nanoseconds
    assert body["timings"]["draft_n"] == 6 and body["timings"]["draft_n_accepted"] == 4


def test_a_streamed_chat_is_ndjson_with_tool_calls_whole(client, fake):
    fake.queue(*answer("Hi", calls=[("get", '{"city": "Paris"}')], finish="stop"))
    got = lines(client.post("/api/chat", json={"model": "fake", "messages": HI, "tools": [
        {"type": "function", "function": {"name": "get"}}]}))  # fmt: skip
    assert "".join(x["message"]["content"] for x in got) == "Hi"
    assert [x["done"] for x in got] == [False] * (len(got) - 1) + [True]
    (call,) = next(x for x in got if "tool_calls" in x["message"])["message"]["tool_calls"]
    assert call["function"] == {"index": 0, "name": "get", "arguments": {"city": "Paris"}}
    assert got[-1]["done_reason"] == "stop" and "eval_count" in got[-1]


def test_generate_streams_response_text_and_says_length(client, fake):
    fake.queue(*answer("abcdef", finish="length", pieces=3))
    got = lines(client.post("/api/generate", json={"model": "fake", "prompt": "x"}))
    # the first line goes at once, before the prompt is read: empty, not done
    assert [x["response"] for x in got] == ["", "ab", "cd", "ef", ""]
    assert got[0]["done"] is False and got[-1]["done_reason"] == "length"


def test_logprobs_in_ollama_shape(client, fake):
    fake.queue(*answer("ab", logprobs=True))
    body = client.post(
        "/api/chat",
        json={"model": "fake", "messages": HI, "stream": False, "logprobs": True, "top_logprobs": 1},
    ).json()
    assert [(x["token"], x["logprob"], x["bytes"]) for x in body["logprobs"]] == [
        ("a", -0.25, [97]),
        ("b", -0.25, [98]),
    ]
    assert fake.settings[-1].logprobs and fake.settings[-1].top_logprobs == 1


def test_empty_messages_or_prompt_load_the_model(client, fake):
    for url, body in (("/api/chat", {"messages": []}), ("/api/generate", {"prompt": "", "keep_alive": 0})):
        r = client.post(url, json={"model": "fake"} | body)
        assert r.json()["done"] is True and r.json()["done_reason"] == "load"
    assert fake.requests == []


def test_model_calls(client, fake):
    (m,) = client.get("/api/tags").json()["models"]
    assert m["name"] == m["model"] == "fake:latest" and m["size"] == 2000 and m["details"]["format"] == "gguf"
    assert client.head("/api/tags").status_code == 200
    show = client.post("/api/show", json={"model": "fake:latest"}).json()
    assert show["model_info"][".context_length"] == 2048 and "completion" in show["capabilities"]
    assert show["details"]["parameter_size"] == "1K"
    (p,) = client.get("/api/ps").json()["models"]
    assert p["context_length"] == 2048 and p["name"] == "fake:latest"
    assert client.get("/api/version").json()["version"].count(".") == 2


def test_file_calls_name_the_localspec_command(client):
    for method, path, cmd in [
        ("POST", "/api/pull", "localspec pull"), ("POST", "/api/create", "localspec pair"),
        ("DELETE", "/api/delete", "localspec list"), ("POST", "/api/copy", "folder"),
        ("POST", "/api/push", "folder"), ("HEAD", "/api/blobs/sha256:00", None),
    ]:  # fmt: skip
        r = client.request(method, path, json={"model": "x"})
        assert r.status_code == 501, (path, r.text)
        if cmd:
            assert cmd in error(r, 501), path


def test_root_is_ollama_for_clients_and_the_page_for_browsers(client):
    for r in (client.get("/"), client.head("/"), client.get("/", headers={"Accept": "application/json"})):
        assert r.status_code == 200
    assert client.get("/").text == "Ollama is running"
    page = client.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.headers["content-type"].startswith("text/html") and "<html" in page.text.lower()


def test_errors_take_ollama_shape(client, fake):
    assert "options.mirostat" in error(
        client.post("/api/chat", json={"model": "fake", "messages": HI, "options": {"mirostat": 2}}), 400
    )
    assert "options.num_ctx" in error(
        client.post("/api/chat", json={"model": "fake", "messages": HI, "options": {"num_ctx": 4096}}), 400
    )
    assert "options.bogus" in error(
        client.post("/api/chat", json={"model": "fake", "messages": HI, "options": {"bogus": 1}}), 400
    )
    assert "not valid base64" in error(
        client.post(
            "/api/chat",
            json={"model": "fake", "messages": [{"role": "user", "content": "x", "images": ["AA==", "no!"]}]},
        ),
        400,
    )
    assert "raw prompt is text only" in error(
        client.post("/api/generate", json={"model": "fake", "prompt": "p", "raw": True, "images": ["AA=="]}),
        400,
    )
    for field, value in (
        ("template", "{{ .Prompt }}"),
        ("context", [1, 2]),
    ):
        assert field in error(
            client.post("/api/generate", json={"model": "fake", "prompt": "p", field: value}), 400
        )
    assert "format" in error(
        client.post("/api/chat", json={"model": "fake", "messages": HI, "format": "xml"}), 400
    )
    assert "think" in error(
        client.post("/api/chat", json={"model": "fake", "messages": HI, "think": "lots"}), 400
    )
    assert "model" in error(client.post("/api/chat", json={"messages": HI}), 400)
    assert "JSON" in error(
        client.post("/api/chat", content=b"{", headers={"Content-Type": "application/json"}), 400
    )
    assert "temperature" in error(
        client.post("/api/chat", json={"model": "fake", "messages": HI, "options": {"temperature": -1}}), 400
    )
    assert error(client.get("/api/nothing"), 404)
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
    }
    assert "messages.1.tool_calls.0.function.arguments" in error(
        client.post("/api/chat", json={"model": "fake", "messages": HI + [call]}), 400
    )
    fake.refuse(APIError(503, "busy", code="server_overloaded", headers={"Retry-After": "1"}))
    r = client.post("/api/chat", json={"model": "fake", "messages": HI})
    assert error(r, 503) == "busy" and r.headers["retry-after"] == "1"


def test_a_stream_that_fails_ends_with_an_error_line(client, fake):
    fake.queue(*answer("Hel")[:1], APIError(503, "the server lost an rpc-server"))
    got = lines(client.post("/api/chat", json={"model": "fake", "messages": HI}))
    assert got[-1] == {"error": "the server lost an rpc-server"}
    assert fake.streams[-1].cancelled


def test_the_api_key_is_asked_in_ollama_shape(fake):
    with TestClient(create_app(Settings(api_key="k"), model=fake), base_url="http://localhost") as c:
        r = c.post("/api/chat", json={"model": "fake", "messages": HI})
        assert r.status_code == 401 and "API key" in r.json()["error"]
        ok = c.post(
            "/api/chat",
            json={"model": "fake", "messages": HI, "stream": False},
            headers={"Authorization": "Bearer k"},
        )
        assert ok.status_code == 200
