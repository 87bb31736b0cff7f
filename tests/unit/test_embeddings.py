"""Embeddings on the fake engine: /v1/embeddings (OpenAI's shape, float and base64) and Ollama's
/api/embed and /api/embeddings - what each input becomes, truncation by each API's convention, and
bad input as one error in the dialect's own shape. Also the pure parts of the engine's embeddings:
inputs packed into passes, rows scaled to unit length."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.engine.embed import passes, unit
from localspec.errors import LocalspecError
from localspec.server import create_app

from ..fake_engine import FakeModel


@pytest.fixture()
def fake():
    return FakeModel(embed_ctx=8)


@pytest.fixture()
def client(fake):
    with TestClient(create_app(Settings(), model=fake), base_url="http://localhost") as c:
        yield c


def test_openai_inputs_and_both_encodings(client, fake):
    for given, inputs in [
        ("abc", ["abc"]), (["ab", "cd"], ["ab", "cd"]), ([97, 98], [[97, 98]]), ([[97], [98, 99]], [[97], [98, 99]]),
    ]:  # fmt: skip
        body = client.post("/v1/embeddings", json={"model": "fake", "input": given}).json()
        assert fake.embedded[-1] == (inputs, False)
        assert body["object"] == "list" and body["model"] == "fake"
        assert [d["index"] for d in body["data"]] == list(range(len(inputs)))
    body = client.post(
        "/v1/embeddings", json={"input": ["abc", "d"], "model": "text-embedding-3-small"}
    ).json()
    assert body["usage"] == {"prompt_tokens": 4, "total_tokens": 4}  # any model name: the one served
    floats = [d["embedding"] for d in body["data"]]
    b64 = client.post("/v1/embeddings", json={"input": ["abc", "d"], "encoding_format": "base64"}).json()
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4").tolist() for d in b64["data"]]
    assert np.allclose(decoded, floats) and np.allclose(np.linalg.norm(floats, axis=1), 1)


def test_openai_refuses_what_it_cannot_do(client):
    def error(body: dict, status: int = 400) -> dict:
        r = client.post("/v1/embeddings", json=body)
        assert r.status_code == status, r.text
        return r.json()["error"]

    e = error({"input": "abcdefghijk"})  # over the context: refused, as OpenAI refuses
    assert e["param"] == "input" and e["code"] == "context_length_exceeded"
    assert error({"input": "abc", "dimensions": 2})["param"] == "dimensions"
    assert error({"input": []})["param"] == "input"
    assert error({"input": ""})["param"] == "input"
    assert error({"input": ["a", 1]})["param"].startswith("input")
    assert error({"input": "a", "encoding_format": "int8"})["param"] == "encoding_format"
    assert error({"input": "a", "truncate": True})["param"] == "truncate"
    assert "input" in error({})["param"]


def test_ollama_embed_truncates_unless_told_not_to(client, fake):
    body = client.post("/api/embed", json={"model": "fake", "input": ["abcdefghijk", "xy"]}).json()
    assert fake.embedded[-1] == (["abcdefghijk", "xy"], True)
    assert body["model"] == "fake" and len(body["embeddings"]) == 2 and body["prompt_eval_count"] == 10
    r = client.post("/api/embed", json={"model": "fake:latest", "input": "abcdefghijk", "truncate": False})
    assert r.status_code == 400 and set(r.json()) == {"error"} and "tokens" in r.json()["error"]
    assert client.post("/api/embed", json={"model": "fake", "input": ""}).json()["embeddings"] == []
    one = client.post("/api/embeddings", json={"model": "fake", "prompt": "abc"}).json()["embedding"]
    assert np.isclose(np.linalg.norm(one), 1) and fake.embedded[-1] == (["abc"], False)


def test_ollama_embed_errors(client):
    for body, status, word in [
        ({"model": "fake", "input": ["a", ""]}, 400, "input.1"),
        ({"model": "fake", "input": "a", "dimensions": 2}, 400, "dimensions"),
        ({"model": "fake", "input": [1, 2]}, 400, "input"),
        ({"model": "fake", "input": "a", "options": {"mirostat_x": 1}}, 400, "options.mirostat_x"),
    ]:
        r = client.post("/api/embed", json=body)
        assert r.status_code == status and word in r.json()["error"], (body, r.text)


def test_passes_pack_consecutive_inputs():
    assert passes([3, 3, 3, 8, 1], n_ctx=8, max_seqs=16) == [
        range(0, 2),
        range(2, 3),
        range(3, 4),
        range(4, 5),
    ]
    assert passes([1] * 5, n_ctx=8, max_seqs=2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert passes([], n_ctx=8, max_seqs=2) == []


def test_unit_rows():
    v = unit(np.array([[3.0, 4.0], [0.0, 0.0]], np.float32))
    assert np.allclose(v, [[0.6, 0.8], [0.0, 0.0]])
    with pytest.raises(LocalspecError, match="NaN"):
        unit(np.array([[np.nan, 1.0]], np.float32))
