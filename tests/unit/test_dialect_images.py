"""Every dialect's image shape becomes the same internal message (its text, and each image's bytes at
its place in it), so it reaches the same tokens: the chat plan tokenizes messages, never a dialect's
body. On the fake engine; tests/system/test_server_images.py sends them to a real model."""

from __future__ import annotations

import base64

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.server import create_app

from ..fake_engine import FakeModel
from ..helpers import png

IMAGE = png(1)
B64 = base64.b64encode(IMAGE).decode()
ASK = "What is in this picture?"

# the same turn - an image, then a question - in each dialect's shape: (path, body)
SHAPES = {
    "openai-chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}},
        {"type": "text", "text": ASK}]}]}),
    "ollama-chat": ("/api/chat", {"model": "fake", "stream": False,
                                  "messages": [{"role": "user", "content": ASK, "images": [B64]}]}),
    "ollama-generate": ("/api/generate", {"model": "fake", "stream": False, "prompt": ASK, "images": [B64]}),
    "anthropic": ("/v1/messages", {"model": "fake", "max_tokens": 9, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
        {"type": "text", "text": ASK}]}]}),
    "responses": ("/v1/responses", {"model": "fake", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": f"data:image/png;base64,{B64}"},
        {"type": "input_text", "text": ASK}]}]}),
}  # fmt: skip


@pytest.fixture(scope="module")
def parsed() -> dict:
    fake = FakeModel()
    out = {}
    with TestClient(create_app(Settings(parallel=4), model=fake), base_url="http://localhost") as c:
        for name, (path, body) in SHAPES.items():
            r = c.post(path, json=body)
            assert r.status_code == 200, (name, r.text)
            out[name] = fake.requests[-1]
    return out


@pytest.mark.parametrize("name", [n for n in SHAPES if n != "openai-chat"])
def test_each_dialect_makes_the_same_message_as_openai_chat(parsed, name):
    (want,) = parsed["openai-chat"].messages
    (got,) = parsed[name].messages
    assert got == want
    assert (got.content, [(i.at, i.data) for i in got.images]) == (ASK, [(0, IMAGE)])
