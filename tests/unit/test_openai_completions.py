"""OpenAI's legacy completions dialect on the fake engine: a raw prompt in, text and the legacy
logprobs shape out, whole and streamed."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.server import create_app

from ..fake_engine import FakeModel, answer

URL = "/v1/completions"


@pytest.fixture()
def fake():
    return FakeModel()


@pytest.fixture()
def client(fake):
    with TestClient(create_app(Settings(), model=fake), base_url="http://localhost") as c:
        yield c


def test_a_prompt_becomes_the_internal_request(client, fake):
    assert (
        client.post(
            URL, json={"prompt": ["Once"], "logprobs": 2, "draft_max": 3, "max_tokens": 4}
        ).status_code
        == 200
    )
    req, s = fake.requests[-1], fake.settings[-1]
    assert req.prompt == "Once" and not req.chat and not req.messages
    assert (s.logprobs, s.top_logprobs, s.draft_max, s.max_tokens) == (True, 2, 3, 4)
    assert client.post(URL, json={"prompt": [1, 2, 3]}).status_code == 200
    assert fake.requests[-1].prompt == (1, 2, 3)


@pytest.mark.parametrize(
    "body, param",
    [({"prompt": []}, "prompt"), ({"prompt": ["a", "b"]}, "prompt"), ({"prompt": "a", "echo": True}, "echo"),
     ({"prompt": [1, 2], "suffix": "z"}, "prompt"), ({"prompt": "a", "functions": []}, "functions")],
)  # fmt: skip
def test_what_it_refuses(client, fake, body, param):
    r = client.post(URL, json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert not fake.requests


def test_a_whole_completion_with_logprobs(client, fake):
    fake.queue(*answer("Hi!", logprobs=True, prompt_tokens=3))
    body = client.post(URL, json={"prompt": "x", "logprobs": 1}).json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    (choice,) = body["choices"]
    assert (choice["text"], choice["finish_reason"]) == ("Hi!", "stop")
    assert choice["logprobs"]["tokens"] == ["H", "i", "!"] and choice["logprobs"]["text_offset"] == [0, 1, 2]
    assert choice["logprobs"]["top_logprobs"][0] == {"H": -0.25}
    assert body["usage"]["total_tokens"] == 6 and body["timings"]["draft_n_accepted"] == 4


def test_a_streamed_completion(client, fake):
    fake.queue(*answer("Hello", logprobs=True))
    r = client.post(URL, json={"prompt": "x", "stream": True, "logprobs": 0})
    data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == "Hello"
    assert all(c["choices"][0]["logprobs"] is None for c in chunks)  # logprobs 0 streams none (as before)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and "timings" in chunks[-1]
    assert "timings" not in chunks[0] and "usage" not in chunks[0]  # empty extras are left out
