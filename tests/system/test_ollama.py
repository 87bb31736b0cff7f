"""Ollama's API and the embeddings endpoints on a real `localspec serve` of the embedded pair,
through the official `ollama` and `openai` clients: streamed equals whole (greedy), a tool call that
validates and whose result goes back in, a JSON schema that holds, the model calls, embeddings in
both of OpenAI's encodings, and a second chat turn that evaluates only its new tokens, whichever
dialect carried the first."""

from __future__ import annotations

import base64
import json
import secrets

import httpx
import jsonschema
import numpy as np
import ollama
import pytest

from ..bad_inputs import DIALECT_REQUESTS
from ..helpers import Server

GREEDY = {"temperature": 0, "num_predict": 12}
ASK = [{"role": "user", "content": "Name three rivers."}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The name of the city"}},
            "required": ["city"],
        },
    },
}
PERSON = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]}, "sunny": {"type": "boolean"}},
    "required": ["city", "sunny"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(standin_pair):
    srv = Server(standin_pair, "--parallel", "2", "--embed-ctx", "64", start_timeout=600)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server) -> ollama.Client:
    return ollama.Client(host=server.url, timeout=300)


def _evaluated(server: Server, run) -> int:  # noqa: ANN001
    """Prompt tokens the target evaluated while `run()` ran (the rest came from a cached prefix)."""
    key = "localspec:prompt_tokens_evaluated_total{role=target}"
    before = server.metrics().get(key, 0)
    run()
    return int(server.metrics()[key] - before)


def test_chat_and_generate_stream_what_they_answer_whole(client):
    whole = client.chat(model="standin", messages=ASK, options=GREEDY)
    parts = list(client.chat(model="standin", messages=ASK, options=GREEDY, stream=True))
    assert "".join(p.message.content for p in parts) == whole.message.content and whole.message.content
    assert parts[-1].done and parts[-1].done_reason == whole.done_reason == "length"
    assert parts[-1].eval_count == whole.eval_count == 12 and whole.prompt_eval_count > 10
    assert whole.eval_duration > 0 and whole.total_duration >= whole.eval_duration
    g = client.generate(model="default:latest", prompt="Say hello.", options=GREEDY)
    streamed = "".join(
        p.response for p in client.generate(model="standin", prompt="Say hello.", options=GREEDY, stream=True)
    )
    assert streamed == g.response and g.response


def test_a_tool_call_validates_and_its_result_goes_back_in(client):
    msgs = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}]
    r = client.chat(model="standin", messages=msgs, tools=[WEATHER], options={"temperature": 0})
    (call,) = r.message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(dict(call.function.arguments), WEATHER["function"]["parameters"])
    msgs += [
        r.message.model_dump(exclude_none=True),
        {"role": "tool", "content": "sunny, 24 C", "tool_name": "get_weather"},
    ]
    after = client.chat(model="standin", messages=msgs, tools=[WEATHER], options=GREEDY)
    assert after.done and after.prompt_eval_count > r.prompt_eval_count + 5  # the result is in the prompt


def test_format_schema_holds(client):
    r = client.chat(
        model="standin", messages=[{"role": "user", "content": "Is it sunny in Rome? Answer in JSON."}],
        format=PERSON, options={"temperature": 0},
    )  # fmt: skip
    jsonschema.validate(json.loads(r.message.content), PERSON)


def test_model_calls(client, server):
    (m,) = client.list().models
    assert m.model == "standin:latest" and m.details.format == "gguf" and m.size > 0
    show = client.show("standin")
    assert show.modelinfo["llama.context_length"] == 1024 and "completion" in show.capabilities
    assert client.ps().models[0].context_length == 1024
    assert httpx.get(server.url + "/api/version").json()["version"]
    assert (
        httpx.head(server.url + "/").status_code == 200
        and httpx.get(server.url + "/").text == "Ollama is running"
    )
    with pytest.raises(ollama.ResponseError, match="localspec pull") as e:
        client.pull("llama3.2")
    assert e.value.status_code == 501


def test_embeddings_in_both_clients(client, server):
    e = client.embed(model="standin", input=["The cat sat on the mat.", "Stocks fell."])
    assert len(e.embeddings) == 2 and len(e.embeddings[0]) == 576 and e.prompt_eval_count > 4
    oa = server.client()
    texts = [
        "The cat sat on the mat.",
        "A cat was sitting on the rug.",
        "Quarterly revenue rose eight percent.",
    ]
    floats = oa.embeddings.create(model="standin", input=texts, encoding_format="float")
    b64 = oa.embeddings.create(model="standin", input=texts)  # the client asks for base64 and decodes it
    v = np.array([d.embedding for d in floats.data])
    assert np.allclose(v, [d.embedding for d in b64.data]) and floats.usage.prompt_tokens > 10
    assert np.allclose(v[0], e.embeddings[0], atol=1e-5)  # one model, one vector, whatever the dialect
    raw = httpx.post(
        server.url + "/v1/embeddings", json={"input": "hi", "encoding_format": "base64"}, timeout=300
    ).json()
    assert len(np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), "<f4")) == 576
    # meaning, on the stand-in: a sentence is nearer its paraphrase than an unrelated one
    assert v[0] @ v[1] > v[0] @ v[2] + 0.1 and v[0] @ v[1] > v[1] @ v[2] + 0.1
    too_long = httpx.post(server.url + "/v1/embeddings", json={"input": "word " * 100}, timeout=300)
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    cut = httpx.post(
        server.url + "/api/embed", json={"model": "standin", "input": "word " * 100}, timeout=300
    )
    assert cut.json()["prompt_eval_count"] == 64  # Ollama's way: cut to the context


@pytest.mark.parametrize("first", ["openai", "ollama"])
def test_a_second_turn_evaluates_only_its_new_tokens(client, server, first):
    turn1 = [{"role": "user", "content": f"Describe the colour {secrets.token_hex(6)} in one sentence."}]
    if first == "openai":
        r1 = server.client().chat.completions.create(
            model="standin", messages=turn1, max_tokens=12, temperature=0
        )
        reply, n1 = r1.choices[0].message.content, r1.usage.prompt_tokens
    else:
        r1 = client.chat(model="standin", messages=turn1, options=GREEDY)
        reply, n1 = r1.message.content, r1.prompt_eval_count
    turn2 = turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And in French?"}]
    out = {}
    evaluated = _evaluated(
        server,
        lambda: out.update(r=list(client.chat(model="standin", messages=turn2, options=GREEDY, stream=True))),
    )
    n2 = out["r"][-1].prompt_eval_count  # (the client drops the last line's `timings`)
    assert 0 < evaluated <= n2 - n1, (evaluated, n1, n2)  # the first turn's prompt came from the cache


@pytest.mark.parametrize(
    "path, body, status, needles", [c[1:] for c in DIALECT_REQUESTS], ids=[c[0] for c in DIALECT_REQUESTS]
)
def test_bad_request_gets_one_error_in_its_dialects_shape(server, path, body, status, needles):
    r = httpx.post(server.url + path, content=body.encode(), headers={"content-type": "application/json"},
                   timeout=120)  # fmt: skip
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    message = error if path.startswith("/api/") else error["message"]  # Ollama's shape, or OpenAI's
    assert isinstance(message, str) and message and "\n" not in message, r.text[:300]
    assert any(n in message for n in needles), message


def test_the_server_logged_no_traceback(server):  # after every request above
    assert "Traceback" not in server.output(), server.output()[-3000:]
