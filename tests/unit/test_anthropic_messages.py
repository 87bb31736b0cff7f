"""Anthropic's Messages dialect on the fake engine: what a body (Claude Code's included) becomes, and
what events become on the wire - a message and its event stream, each checked against the anthropic
SDK's own types - and errors in Anthropic's shape."""

from __future__ import annotations

import json

import anthropic.types as at
import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from localspec.config.settings import Settings
from localspec.server import create_app
from localspec.server.anthropic import blocks
from localspec.serving import APIError

from ..bad_inputs import ANTHROPIC_BAD_BODIES
from ..fake_engine import answer
from ..helpers import sse_frames

URL = "/v1/messages"
HI = [{"role": "user", "content": "Hi"}]
EVENT = TypeAdapter(at.RawMessageStreamEvent)


def events(r) -> list[tuple[str, dict]]:
    """(event name, data) per SSE frame; the data's own type must agree with the event line."""
    assert r.status_code == 200, r.text
    return sse_frames(r.text)


def claude_code_body(**more) -> dict:
    """The shape of Claude Code 2.1's first request (`claude -p`), shortened."""
    return {
        "model": "claude-sonnet-4-5-20250929", "max_tokens": 64000, "stream": True,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.3; cc_entrypoint=sdk-cli"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "Say hi", "cache_control": {"type": "ephemeral"}},
        ]}],
        "tools": [{"name": "Bash", "description": "Run a command", "input_schema": {
            "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}],
        "metadata": {"user_id": "user_abc"}, "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "medium"}, **more,
    }  # fmt: skip


def test_claude_codes_request_is_accepted(client, fake):
    fake.queue(*answer("hi"))
    frames = events(client.post(URL + "?beta=true", json=claude_code_body()))
    assert frames[-1][0] == "message_stop"
    req, s = fake.requests[-1], fake.settings[-1]
    assert req.messages[0].role == "system" and req.messages[0].content == "You are Claude Code."
    assert req.messages[1].content == "<system-reminder>ctx</system-reminder>\nSay hi"  # blocks: lines
    assert [t.name for t in req.tools] == ["Bash"] and req.tool_choice == "auto"
    assert req.model == "claude-sonnet-4-5-20250929" and req.reasoning is None and req.stream
    assert req.clamp_max_tokens and s.max_tokens == 64000  # the model lowers it to what fits


def test_a_body_becomes_the_internal_request(client, fake):
    body = {
        "model": "m", "max_tokens": 9, "system": "Be brief.", "stop_sequences": ["END"],
        "temperature": 0, "top_k": 5, "thinking": {"type": "disabled"},
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": "sig"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such city", "is_error": True},
                {"type": "text", "text": "And?"},
            ]},
        ],
        "tools": [{"name": "get", "input_schema": {"type": "object"}, "strict": True}],
        "tool_choice": {"type": "tool", "name": "get", "disable_parallel_tool_use": True},
    }  # fmt: skip
    assert client.post(URL, json=body).status_code == 200
    req, s = fake.requests[-1], fake.settings[-1]
    # a message's text before its tool results, as llama.cpp converts it (test_claude_code_prompt.py)
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "user", "tool", "tool"]
    assistant = req.messages[2]
    assert (assistant.content, assistant.reasoning) == ("Checking.", "Look it up.")
    (call,) = assistant.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("toolu_1", "get", {"city": "Paris"})
    assert req.messages[3].content == "And?"
    assert (req.messages[4].tool_call_id, req.messages[4].content) == ("toolu_1", "sunny")
    assert req.messages[5].content == "Error: no such city"
    assert (req.tool_choice, req.forced_tool, req.parallel_tool_calls) == ("required", "get", False)
    assert req.tools[0].description == ""  # none sent: an empty one, as llama.cpp renders it
    assert req.reasoning is False
    assert (s.max_tokens, s.stop, s.temperature, s.top_k) == (9, ("END",), 0.0, 5)


@pytest.mark.parametrize(
    ("choice", "expected"),
    [({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none")],
)
def test_tool_choice(client, fake, choice, expected):
    tools = [{"name": "get", "input_schema": {"type": "object"}}]
    body = {"max_tokens": 5, "messages": HI, "tools": tools, "tool_choice": choice}
    assert client.post(URL, json=body).status_code == 200
    assert (fake.requests[-1].tool_choice, fake.requests[-1].forced_tool) == (expected, None)


def test_structured_output_is_the_json_constraint(client, fake):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = {
        "max_tokens": 5,
        "messages": HI,
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    }
    assert client.post(URL, json=body).status_code == 200
    s = fake.settings[-1]
    assert json.loads(s.json_schema) == schema and s.json_strict is True


def test_a_whole_message(client, fake):
    fake.queue(*answer("Hello", reasoning="Think.", calls=[("get", '{"city": "Paris"}')], prompt_tokens=4))
    body = client.post(URL, json={"max_tokens": 50, "messages": HI}).json()
    msg = at.Message.model_validate(body)
    assert msg.id.startswith("msg_") and msg.model == "fake" and msg.role == "assistant"
    thinking, text, call = msg.content
    assert thinking.type == "thinking" and thinking.thinking == "Think."
    assert blocks.reasoning_of(_omitted(thinking)) == "Think."  # the signature carries it
    assert text.type == "text" and text.text == "Hello"
    assert call.type == "tool_use" and (call.name, call.input) == ("get", {"city": "Paris"})
    assert msg.stop_reason == "tool_use" and msg.stop_sequence is None
    assert (msg.usage.input_tokens, msg.usage.output_tokens, msg.usage.cache_read_input_tokens) == (4, 5, 0)
    assert body["timings"]["draft_n"] == 6  # the speculation figures ride along


def _omitted(block):
    """The block as a client sends it back with its text left out (display "omitted")."""
    from localspec.server.anthropic import schemas

    return schemas.Thinking(type="thinking", thinking="", signature=block.signature)


def test_a_thinking_block_sent_back_without_its_text_keeps_it(client, fake):
    fake.queue(*answer("A", reasoning="Because."))
    first = client.post(URL, json={"max_tokens": 5, "messages": HI, "thinking": {"type": "enabled",
                        "budget_tokens": 1024, "display": "omitted"}}).json()  # fmt: skip
    block = first["content"][0]
    assert block["type"] == "thinking" and block["thinking"] == ""  # omitted: not shown...
    turns = [*HI, {"role": "assistant", "content": first["content"]}, {"role": "user", "content": "Go on"}]
    assert client.post(URL, json={"max_tokens": 5, "messages": turns}).status_code == 200
    assert fake.requests[-1].messages[1].reasoning == "Because."  # ...but the template still gets it


@pytest.mark.parametrize(
    ("finish", "stop_string", "max_tokens", "reason", "sequence"),
    [
        ("stop", None, 50, "end_turn", None),
        ("stop", "END", 50, "stop_sequence", "END"),
        ("length", None, 5, "max_tokens", None),
        ("length", None, 64000, "model_context_window_exceeded", None),  # clamped to the context
    ],
)
def test_stop_reasons(client, fake, finish, stop_string, max_tokens, reason, sequence):
    fake.queue(*answer("Hello", finish=finish, stop_string=stop_string))
    body = {"max_tokens": max_tokens, "messages": HI, "stop_sequences": ["END"]}
    msg = at.Message.model_validate(client.post(URL, json=body).json())
    assert (msg.stop_reason, msg.stop_sequence) == (reason, sequence)


def test_the_event_stream(client, fake):
    fake.queue(*answer("Hello", reasoning="Think.", calls=[("get", '{"a": 1}'), ("put", "{}")]))
    frames = events(client.post(URL, json={"max_tokens": 50, "messages": HI, "stream": True}))
    for name, data in frames:
        if name != "ping":  # documented, but not in the SDK's union (its client skips it)
            EVENT.validate_python(data)
    names = [n for n, _ in frames]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    starts = [d for n, d in frames if n == "content_block_start"]
    assert [(d["index"], d["content_block"]["type"]) for d in starts] == [
        (0, "thinking"), (1, "text"), (2, "tool_use"), (3, "tool_use")
    ]  # fmt: skip
    assert starts[2]["content_block"]["name"] == "get" and starts[2]["content_block"]["id"]
    deltas = [d for n, d in frames if n == "content_block_delta"]

    def joined(index, kind, key):
        return "".join(d["delta"][key] for d in deltas if d["index"] == index and d["delta"]["type"] == kind)

    assert joined(0, "thinking_delta", "thinking") == "Think."
    assert blocks.reasoning_of(_signed(joined(0, "signature_delta", "signature"))) == "Think."
    assert joined(1, "text_delta", "text") == "Hello"
    assert json.loads(joined(2, "input_json_delta", "partial_json")) == {"a": 1}
    stops = [d["index"] for n, d in frames if n == "content_block_stop"]
    assert stops == [0, 1, 2, 3]
    delta = frames[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 5 and delta["timings"]["draft_n_accepted"] == 4


def _signed(signature):
    from localspec.server.anthropic import schemas

    return schemas.Thinking(type="thinking", signature=signature)


def test_disabled_thinking_shows_no_thinking_block(client, fake):
    fake.queue(*answer("Hi", reasoning="Hidden."))
    body = {"max_tokens": 5, "messages": HI, "thinking": {"type": "disabled"}, "stream": True}
    frames = events(client.post(URL, json=body))
    assert [d["content_block"]["type"] for n, d in frames if n == "content_block_start"] == ["text"]


def test_count_tokens(client, fake):
    body = {"model": "claude-x", "messages": HI, "system": "S", "tools": [{"name": "t", "input_schema": {}}]}
    r = client.post(URL + "/count_tokens?beta=true", json=body)
    assert r.status_code == 200
    assert at.MessageTokensCount.model_validate(r.json()).input_tokens == len(
        "<system>S\n<user>Hi\n<assistant>"
    )
    assert not fake.requests  # counted, not generated


def test_the_model_list_in_anthropics_shape(client):
    r = client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})
    (model,) = r.json()["data"]
    info = at.ModelInfo.model_validate(model)
    assert info.id == "fake" and model["max_input_tokens"] == 4096
    assert client.get("/v1/models").json()["object"] == "list"  # OpenAI's clients: OpenAI's shape


def error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    return body["error"]


@pytest.mark.parametrize(
    ("case", "body", "words"), ANTHROPIC_BAD_BODIES, ids=[c[0] for c in ANTHROPIC_BAD_BODIES]
)
def test_bad_bodies_get_anthropics_error_shape(client, case, body, words):
    e = error(client.post(URL, json=body), 400)
    assert e["type"] == "invalid_request_error" and words in e["message"], case


def test_other_errors_take_anthropics_shape(client, fake):
    assert error(client.post(URL, content=b"{", headers={"content-type": "application/json"}), 400)
    assert error(client.post("/v1/messages/batches", json={}), 404)["type"] == "not_found_error"
    fake.refuse(APIError(503, "busy", headers={"Retry-After": "1"}))
    r = client.post(URL, json={"max_tokens": 5, "messages": HI})
    assert error(r, 503)["type"] == "overloaded_error" and r.headers["retry-after"] == "1"


def test_a_stream_that_fails_ends_with_an_error_event(client, fake):
    fake.queue(*answer("Hel")[:1], APIError(503, "the server lost an rpc-server"))
    frames = events(client.post(URL, json={"max_tokens": 5, "messages": HI, "stream": True}))
    name, data = frames[-1]
    assert name == "error" and data["error"] == {
        "type": "overloaded_error",
        "message": "the server lost an rpc-server",
    }
    assert fake.streams[-1].cancelled


@pytest.mark.parametrize("header", [{"x-api-key": "k"}, {"Authorization": "Bearer k"}])
def test_the_api_key_as_either_header(fake, header):
    with TestClient(create_app(Settings(api_key="k"), model=fake), base_url="http://localhost") as c:
        body = {"max_tokens": 5, "messages": HI}
        assert error(c.post(URL, json=body), 401)["type"] == "authentication_error"
        assert error(c.post(URL, json=body, headers={"x-api-key": "no"}), 401)
        assert c.post(URL, json=body, headers=header).status_code == 200
