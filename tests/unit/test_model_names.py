"""The one model-name rule, in every dialect: a single-model server serves any name (llama-server's
rule; docs/serving.md, "Model names"). Each route takes a name it does not serve - OpenAI's,
Anthropic's, Ollama's with its tag - and the one model answers, under its own name."""

from __future__ import annotations

import pytest

from ..fake_engine import answer

HI = [{"role": "user", "content": "Hi"}]
GENERATING = [  # (path, body, where the answer names its model)
    ("/v1/chat/completions", {"messages": HI}, lambda b: b["model"]),
    ("/v1/completions", {"prompt": "Hi"}, lambda b: b["model"]),
    ("/v1/responses", {"input": "Hi"}, lambda b: b["model"]),
    ("/v1/messages", {"max_tokens": 8, "messages": HI}, lambda b: b["model"]),
    ("/api/chat", {"messages": HI, "stream": False}, lambda b: b["model"]),
    ("/api/generate", {"prompt": "Hi", "stream": False}, lambda b: b["model"]),
]
ASKING = [  # routes that ask about the model or use it without generating
    ("/v1/messages/count_tokens", {"messages": HI}),
    ("/v1/embeddings", {"input": "a"}),
    ("/api/embed", {"input": "a"}),
    ("/api/embeddings", {"prompt": "a"}),
    ("/api/show", {}),
    ("/tokenize", {"content": "a"}),
]
NAMES = ["gpt-4o", "claude-sonnet-4-5", "llama3:latest"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("path, body, named", GENERATING, ids=[g[0] for g in GENERATING])
def test_any_name_is_answered_by_the_one_model(client, fake, path, body, named, name):
    fake.queue(*answer("ok"))
    r = client.post(path, json={"model": name, **body})
    assert r.status_code == 200, r.text
    assert named(r.json()) == "fake" and fake.requests[-1].model in (name, name.removesuffix(":latest"))


@pytest.mark.parametrize("path, body", ASKING, ids=[a[0] for a in ASKING])
def test_any_name_reaches_the_one_model_on_every_other_route(client, path, body):
    r = client.post(path, json={"model": "gpt-4o", **body})
    assert r.status_code == 200, r.text


def test_no_name_is_the_one_model_too(client, fake):
    fake.queue(*answer("ok"))
    assert client.post("/v1/chat/completions", json={"messages": HI}).json()["model"] == "fake"
