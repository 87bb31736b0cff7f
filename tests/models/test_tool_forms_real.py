"""Tool calls as the real Qwen2.5-Coder-1.5B writes them. Asked plainly it writes a ```json fence (the
Coder's habit); a system message asking for the bare object gets one. It never writes the
`<tool_call>` tags its template asks for - not when shown them in the question, nor after an
assistant turn that used them (it writes the bare object then) - so the tagged form comes from
`tool_choice: required`, where the grammar writes the tags (special tokens, named by id) and the
model the call inside them. Through the chat plan and the engine, on the default pair (its 0.5B
drafting, K=3) under the tool grammar (lazy for `auto`), the answer becomes the call, and plain
decoding gives the same tokens (greedy, tie-aware); through the server's routes each dialect
hands it to the client."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.server import create_app
from localspec.serving import plan as chat_plan
from localspec.serving.request import Message, Request, Tool

from ..helpers import MARGIN, sse_frames, teacher_forced_gaps

pytestmark = pytest.mark.slow

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = Tool("get_weather", "The weather in a city", PARAMS)
ASK = "What is the weather in Paris?"
PROMPTS = {  # form: (its opening, the conversation that gets it, tool_choice)
    "fenced": ("```json", [("user", ASK)], "auto"),
    "bare": ("{", [("system", 'When you call a tool, answer with only the JSON object {"name": ..., '
                              '"arguments": ...}, no code block, no tags.'), ("user", ASK)], "auto"),
    "tagged": ("<tool_call>", [("user", ASK)], "required"),
}  # fmt: skip
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def served(real_pair):
    """The server app in-process on the default pair (the 1.5B, its 0.5B Q8_0 drafting) and its
    engine: K=3 (cost_bound 0: drafts are never cut back on a busy machine), greedy."""
    s = Settings.load(
        pair=real_pair, draft_max=3, cost_bound=0, n_ctx=2048, temperature=0, parallel=1,
        max_tokens=MAX_TOKENS,
    )  # fmt: skip
    engines: list[Engine] = []

    def provide() -> Engine:
        engines.append(Engine(s))
        return engines[0]

    with TestClient(create_app(s, provide), base_url="http://localhost") as client:
        yield client, engines[0], s


def _request(form: str) -> Request:
    _, turns, choice = PROMPTS[form]
    return Request(messages=tuple(Message(r, c) for r, c in turns), tools=(TOOL,), tool_choice=choice)


@pytest.mark.parametrize("form", sorted(PROMPTS))
def test_each_form_is_a_call_and_speculation_gives_plain_decodings_tokens(served, form):
    _, engine, s = served
    p = chat_plan.plan(engine, _request(form), s)
    assert "grammar" in p.overrides  # with auto the grammar is lazy: free text stays free
    kw = dict(keep_special=p.keep_special, max_tokens=MAX_TOKENS, temperature=0, **p.overrides)
    spec = engine.generate(p.prompt_ids, draft_max=3, **kw)
    assert spec.text.lstrip().startswith(PROMPTS[form][0]), spec.text  # the prompt got the form
    assert spec.stats.n_drafted > 0 and spec.finish_reason == "stop", spec.stats
    msg = p.make_parser()
    deltas = msg.feed(spec.text) + msg.finish()
    calls = [(d.name, d.call) for d in deltas if d.name]
    args = "".join(d.arguments for d in deltas if d.call is not None)
    assert calls == [("get_weather", 0)] and json.loads(args) == {"city": "Paris"}, spec.text
    assert not "".join(d.content for d in deltas).strip()
    plain = engine.generate(p.prompt_ids, spec=False, **kw)
    if plain.tokens != spec.tokens:  # only a near-tie may flip (llama.cpp is not batch-invariant)
        i = next(i for i, (a, b) in enumerate(zip(spec.tokens, plain.tokens)) if a != b)
        gaps = (teacher_forced_gaps(engine, p.prompt_ids, t.tokens)[i] for t in (spec, plain))
        assert min(gaps) <= MARGIN, (i, spec.text, plain.text)


def _messages(form: str) -> list[dict]:
    return [{"role": r, "content": c} for r, c in PROMPTS[form][1]]


def test_the_dialects_hand_the_real_calls_to_clients(served):
    """One form per dialect, streamed or whole, four requests in all (each is a real generation)."""
    client, _, _ = served
    fn = {"name": TOOL.name, "description": TOOL.description, "parameters": PARAMS}
    # OpenAI chat, streamed: the tagged form (required)
    r = client.post("/v1/chat/completions", json={"messages": _messages("tagged"), "stream": True,
                                                  "tools": [{"type": "function", "function": fn}],
                                                  "tool_choice": "required"})  # fmt: skip
    chunks = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {")]
    pieces = [d for c in chunks for ch in c["choices"] for d in ch["delta"].get("tool_calls") or []]
    assert [d["function"]["name"] for d in pieces if d.get("id")] == ["get_weather"]
    assert json.loads("".join(d["function"].get("arguments") or "" for d in pieces)) == {"city": "Paris"}
    assert [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")] == [
        "tool_calls"
    ]
    # Anthropic Messages, streamed: the fence
    tool = {"name": fn["name"], "description": fn["description"], "input_schema": PARAMS}
    r = client.post("/v1/messages", json={"max_tokens": MAX_TOKENS, "messages": _messages("fenced"),
                                          "tools": [tool], "stream": True})  # fmt: skip
    frames = sse_frames(r.text)
    uses = [d["content_block"] for n, d in frames if n == "content_block_start"]
    assert [b["type"] for b in uses] == ["tool_use"] and uses[0]["name"] == "get_weather"
    partial = "".join(d["delta"].get("partial_json", "") for n, d in frames if n == "content_block_delta")
    assert json.loads(partial) == {"city": "Paris"}
    # Responses, whole: the bare object (the system message as instructions)
    (system, user) = _messages("bare")
    r = client.post("/v1/responses", json={"instructions": system["content"], "input": user["content"],
                                           "tools": [{"type": "function", **fn}]})  # fmt: skip
    (call,) = [o for o in r.json()["output"] if o["type"] == "function_call"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    # Ollama, whole: the fence
    model = client.get("/health").json()["model"]
    r = client.post("/api/chat", json={"model": model, "messages": _messages("fenced"), "stream": False,
                                       "tools": [{"type": "function", "function": fn}]})  # fmt: skip
    message = r.json()["message"]
    assert [c["function"] for c in message["tool_calls"]] == [
        {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}
    ] and message["content"] == ""
