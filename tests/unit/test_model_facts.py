"""What agents read about the model (issue 57): the context length and the capabilities, where each
client looks - /v1/models (vLLM's max_model_len, OpenRouter's context_length, LM Studio's
max_context_length, llama-server's router's architecture), Ollama's /api/show and /api/tags
(Copilot's BYOK and Zed read `capabilities`)."""

from __future__ import annotations

import dataclasses

import pytest

from localspec.serving import ModelCard

THINKING = "{% if enable_thinking %}<think>{% endif %}"


def card(**kw) -> ModelCard:
    base = ModelCard("m", 0, 4096, 8192, 256, 1000, 2000, "m.gguf", None, 1, None)
    return dataclasses.replace(base, **kw)


@pytest.mark.parametrize("kw, expected", [
    ({}, ["completion", "tools"]),
    ({"fim": True}, ["completion", "tools", "insert"]),
    ({"vision": True, "chat_template": THINKING}, ["completion", "tools", "vision", "thinking"]),
    ({"embeds_only": True, "fim": True}, ["embedding"]),  # as Ollama shows nomic-embed-text
])  # fmt: skip
def test_capabilities_in_ollamas_words(kw, expected):
    assert card(**kw).capabilities == expected


@pytest.fixture()
def facts(fake):
    fake.card = dataclasses.replace(fake.card, n_ctx=16384, fim=True, vision=True)
    return fake


def test_the_model_list_says_the_context_and_capabilities_every_way_clients_read(client, facts):
    (m,) = client.get("/v1/models").json()["data"]
    assert m["max_model_len"] == m["context_length"] == m["max_context_length"] == 16384
    assert m["loaded_context_length"] == 16384
    assert m["capabilities"] == ["completion", "tools", "insert", "vision"]
    assert m["architecture"]["input_modalities"] == ["text", "image"]


def test_ollamas_show_and_tags_say_them_too(client, facts):
    shown = client.post("/api/show", json={"model": "fake"}).json()
    assert shown["capabilities"] == ["completion", "tools", "insert", "vision"]
    assert shown["model_info"][f"{facts.card.arch}.context_length"] == 16384
    (tag,) = client.get("/api/tags").json()["models"]
    assert tag["capabilities"] == shown["capabilities"] and tag["context_length"] == 16384


def test_a_model_without_fim_tokens_or_a_projector_claims_neither(client, fake):
    (m,) = client.get("/v1/models").json()["data"]
    assert m["capabilities"] == ["completion", "tools"] and m["architecture"]["input_modalities"] == ["text"]
