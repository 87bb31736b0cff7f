"""OpenAI's chat completions dialect on the fake engine: what a body becomes (the internal request,
its Settings), and what events become on the wire, whole and streamed, errors included."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.server import create_app
from localspec.serving import APIError

from ..fake_engine import answer

URL = "/v1/chat/completions"
HI = [{"role": "user", "content": "Hi"}]


def sse(r) -> list:
    data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    return [d if d == "[DONE]" else json.loads(d) for d in data]


def test_a_body_becomes_the_internal_request(client, fake):
    body = {
        "model": "fake",
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_call_id": "call_2_0", "name": "get", "content": "sunny"},
        ],
        "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "get"}},
        "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}, "strict": True}},
        "max_completion_tokens": 9, "stop": "END", "temperature": 0, "n": 2, "seed": 5,
        "chat_template_kwargs": {"enable_thinking": False}, "user": "ignored", "keep_alive": "5m",
    }  # fmt: skip
    assert client.post(URL, json=body).status_code == 200
    req, s = fake.requests[-1], fake.settings[-1]
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool"]
    assert req.messages[0].content == "Be \nbrief."  # text parts: a line each, as llama.cpp joins them
    call = req.messages[2].tool_calls[0]
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_2_0", "get", {"city": "Paris"})
    assert (req.messages[3].tool_call_id, req.messages[3].name) == ("call_2_0", "get")
    assert [t.name for t in req.tools] == ["get"] and (req.tool_choice, req.forced_tool) == (
        "required",
        "get",
    )
    assert req.template_vars == {"enable_thinking": False} and (req.n, req.model) == (2, "fake")
    assert req.keep_alive == 300
    assert (s.max_tokens, s.stop, s.temperature, s.seed) == (9, ("END",), 0.0, 5)
    assert json.loads(s.json_schema) == {"type": "object"} and s.json_strict is True


def test_a_whole_answer(client, fake):
    fake.queue(*answer("Hello", reasoning="Think.", prompt_tokens=4))
    body = client.post(URL, json={"messages": HI}).json()
    assert (
        body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-") and body["model"] == "fake"
    )
    (choice,) = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Hello", "reasoning_content": "Think."}
    assert choice["finish_reason"] == "stop" and choice["logprobs"] is None
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    t = body["timings"]
    assert (t["draft_n"], t["draft_n_accepted"], t["speculative"], t["seed"]) == (6, 4, True, 1234)


def test_tool_calls_and_n_choices(client, fake):
    fake.queue(*answer(calls=[("get", '{"city": "Paris"}')]), *answer("B", choice=1, finish="length"))
    body = client.post(URL, json={"messages": HI, "n": 2}).json()
    first, second = body["choices"]
    assert first["message"]["content"] is None and first["finish_reason"] == "tool_calls"
    (call,) = first["message"]["tool_calls"]
    assert (
        call["function"] == {"name": "get", "arguments": '{"city": "Paris"}'} and call["type"] == "function"
    )
    assert (second["index"], second["message"]["content"], second["finish_reason"]) == (1, "B", "length")
    assert body["usage"]["completion_tokens"] == 1  # the prompt counts once for both


def test_a_streamed_answer(client, fake):
    fake.queue(*answer("Hello", reasoning="Think.", calls=[("get", "{}")], logprobs=True))
    body = {"messages": HI, "stream": True, "logprobs": True, "stream_options": {"include_usage": True},
            "localspec": {"mark_drafts": True}}  # fmt: skip
    chunks = sse(client.post(URL, json=body))
    assert chunks[-1] == "[DONE]" and chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-2]]
    assert deltas[0] == {"reasoning_content": "Think."}
    assert "".join(d.get("content", "") for d in deltas) == "Hello"
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["id"] and calls[0]["function"]["name"] == "get"
    assert "".join(c["function"].get("arguments", "") for c in calls) == "{}"
    text = [c for c in chunks[1:-2] if c["choices"][0]["delta"].get("content")]
    assert text[0]["localspec"] == {"from_draft": [True] * 3, "all_draft": True}
    assert [t["token"] for t in text[0]["choices"][0]["logprobs"]["content"]] == ["H", "e", "l"]
    last = chunks[-3]
    assert last["choices"][0]["finish_reason"] == "tool_calls" and last["timings"]["draft_n"] == 6
    assert all(c["usage"] is None for c in chunks[:-2])  # include_usage: null until the usage chunk
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"] == 5


def test_errors_take_openai_shape(client, fake):
    def error(r, status):
        assert r.status_code == status, r.text
        return r.json()["error"]

    e = error(client.post(URL, json={"messages": HI, "audio": {}}), 400)
    assert e["param"] == "audio" and "not supported" in e["message"] and e["type"] == "invalid_request_error"
    e = error(
        client.post(URL, json={"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}), 400
    )
    assert e["param"] == "messages.0.content.0" and "'input_audio'" in e["message"]
    e = error(client.post(URL, json={"messages": HI, "top_p": 0}), 400)
    assert "top_p" in e["message"]
    fake.refuse(APIError(503, "busy", code="server_overloaded", headers={"Retry-After": "1"}))
    r = client.post(URL, json={"messages": HI})
    assert error(r, 503)["type"] == "server_error" and r.headers["retry-after"] == "1"
    assert len(fake.requests) == 2  # the first three never reached the model


def test_a_stream_that_fails_ends_with_the_error(client, fake):
    fake.queue(*answer("Hel")[:1], APIError(503, "the server lost an rpc-server", code="rpc_server_lost"))
    chunks = sse(client.post(URL, json={"messages": HI, "stream": True}))
    assert chunks[-1]["error"]["code"] == "rpc_server_lost" and "[DONE]" not in chunks
    assert fake.streams[-1].cancelled  # however a stream ends, its generation is cancelled


def test_the_api_key_is_asked_in_openai_shape(fake):
    with TestClient(create_app(Settings(api_key="k"), model=fake), base_url="http://localhost") as c:
        r = c.post(URL, json={"messages": HI})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert c.post(URL, json={"messages": HI}, headers={"Authorization": "Bearer k"}).status_code == 200


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


def test_image_parts_ride_at_their_place_in_the_text(client, fake):
    parts = [{"type": "text", "text": "Look: "}, image_part("data:image/png;base64,iVBORw0K\nGgo="),
             {"type": "text", "text": " and "}, image_part("data:image/jpeg;base64,/9j/4A==")]  # fmt: skip
    assert client.post(URL, json={"messages": [{"role": "user", "content": parts}]}).status_code == 200
    (m,) = fake.requests[-1].messages
    assert m.content == "Look:  and "
    assert [(i.at, i.data) for i in m.images] == [(6, b"\x89PNG\r\n\x1a\n"), (11, b"\xff\xd8\xff\xe0")]


@pytest.mark.parametrize(
    ("url", "code", "words"),
    [
        ("https://example.com/cat.png", "invalid_image_url", "remote image URL is not fetched"),
        ("file:///etc/passwd", "invalid_image_url", "data:image/png;base64"),
        ("data:image/png,rawbytes", None, "must be base64"),
        ("data:image/png;base64,not*base64", "invalid_image", "not valid base64"),
    ],
)
def test_an_image_url_the_server_will_not_read_is_a_400(client, fake, url, code, words):
    body = {"messages": [{"role": "user", "content": [image_part(url)]}]}
    r = client.post(URL, json=body)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == "messages.0.content.0" and words in e["message"] and e["code"] == code
    assert not fake.requests  # refused before the model saw it
