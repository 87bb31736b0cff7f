"""Each of Qwen2.5's three ways of writing a call (tags, a ```json fence, a bare object) reaches every
dialect as that dialect's tool call, streamed and whole: the answer's text goes through the Hermes
parser and serving's Answer (what the engine's chunks go through) into events, which the fake model
hands to the real routes - OpenAI's `tool_calls`, Anthropic's `tool_use`, Responses' `function_call`
items and Ollama's `tool_calls`."""

from __future__ import annotations

import json

import pytest

from localspec.chat import families
from localspec.chat.output import answer_parser
from localspec.engine import Chunk
from localspec.serving.answer import Answer

from ..fake_engine import answer
from ..helpers import sse_frames

ARGS = {"city": "Paris"}
FORMS = {
    "tagged": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "fenced": '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```',
    "bare": '{"name": "get_weather", "arguments": {"city": "Paris"}}',
}
TOOL = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
HI = [{"role": "user", "content": "What is the weather in Paris?"}]


def parsed(text: str, pieces: int = 7) -> list:
    """The events of an answer whose text arrives in `pieces` chunks, parsed as a request with the
    tool declared parses it."""
    a = Answer(0, answer_parser(families.HERMES, tools=True, tool_names=[TOOL["name"]]), lambda t: bytes([t]))
    size = -(-len(text) // pieces)
    events = []
    for i in range(0, len(text), size):
        piece = text[i : i + size]
        events += a.feed(Chunk(piece, list(piece.encode()), [False] * len(piece.encode())))
    return events + a.finish(answer(text)[-1].response)


def _openai(client, stream: bool) -> tuple[str, dict, str]:  # noqa: ANN001
    body = {"messages": HI, "tools": [{"type": "function", "function": TOOL}], "stream": stream}
    r = client.post("/v1/chat/completions", json=body)
    if not stream:
        choice = r.json()["choices"][0]
        (call,) = choice["message"]["tool_calls"]
        return call["function"]["name"], json.loads(call["function"]["arguments"]), choice["finish_reason"]
    chunks = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {")]
    name, args, finish = None, "", None
    for c in chunks:
        for ch in c["choices"]:
            finish = ch.get("finish_reason") or finish
            for d in ch["delta"].get("tool_calls") or []:
                name = d["function"].get("name") or name
                args += d["function"].get("arguments") or ""
    return name, json.loads(args), finish


def _anthropic(client, stream: bool) -> tuple[str, dict, str]:  # noqa: ANN001
    tool = {"name": TOOL["name"], "input_schema": TOOL["parameters"]}
    r = client.post(
        "/v1/messages", json={"max_tokens": 50, "messages": HI, "tools": [tool], "stream": stream}
    )
    if not stream:
        body = r.json()
        (call,) = [b for b in body["content"] if b["type"] == "tool_use"]
        assert not [b for b in body["content"] if b["type"] == "text" and b["text"]]
        return call["name"], call["input"], body["stop_reason"]
    frames = sse_frames(r.text)
    (start,) = [
        d for n, d in frames if n == "content_block_start" and d["content_block"]["type"] == "tool_use"
    ]
    args = "".join(d["delta"].get("partial_json", "") for n, d in frames if n == "content_block_delta")
    reason = next(d["delta"]["stop_reason"] for n, d in frames if n == "message_delta")
    return start["content_block"]["name"], json.loads(args), reason


def _responses(client, stream: bool) -> tuple[str, dict, str]:  # noqa: ANN001
    r = client.post("/v1/responses", json={"input": HI[0]["content"], "tools": [{"type": "function", **TOOL}],
                                           "stream": stream})  # fmt: skip
    if stream:
        frames = [d for _, d in sse_frames(r.text)]
        done = [d for d in frames if d["type"] == "response.function_call_arguments.done"]
        assert len(done) == 1
        body = frames[-1]["response"]
    else:
        body = r.json()
    (call,) = [o for o in body["output"] if o["type"] == "function_call"]
    return call["name"], json.loads(call["arguments"]), body["status"]


def _ollama(client, stream: bool) -> tuple[str, dict, str]:  # noqa: ANN001
    body = {
        "model": "fake",
        "messages": HI,
        "tools": [{"type": "function", "function": TOOL}],
        "stream": stream,
    }
    r = client.post("/api/chat", json=body)
    lines = [json.loads(x) for x in r.text.splitlines() if x.strip()]
    (call,) = [c for x in lines for c in x["message"].get("tool_calls", [])]
    assert not "".join(x["message"]["content"] for x in lines)
    return call["function"]["name"], call["function"]["arguments"], lines[-1]["done_reason"]


DIALECTS = {
    "openai": (_openai, "tool_calls"),
    "anthropic": (_anthropic, "tool_use"),
    "responses": (_responses, "completed"),
    "ollama": (_ollama, "stop"),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_each_dialects_tool_call(client, fake, form, dialect, stream):
    call, reason = DIALECTS[dialect]
    fake.queue(*parsed(FORMS[form]))
    assert call(client, stream) == ("get_weather", ARGS, reason)
