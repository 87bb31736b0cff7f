"""nomic-embed-text served by a real `localspec serve`, through the official `openai` and `ollama`
clients: alone (`--target` with no draft: embeddings in every form, generation refused in one line
per dialect), and beside the stand-in pair in a router (both loaded at once, the same vectors)."""

from __future__ import annotations

import httpx
import numpy as np
import ollama
import openai
import pytest

from ..helpers import Server
from ..sentence_pairs import TEXTS, assert_each_pair_nearest

NAME = "nomic-embed-text-v1.5.f16"  # the file's stem
REFUSED = "is an embedding model (nomic-bert): it answers /v1/embeddings and /api/embed"
ARGS = ("--embed-ctx", "512", "--n-threads", "2")


def same(got, want: np.ndarray) -> bool:
    """The same unit vectors, to the rounding of a pass of another size (its sums run in another
    order, ~1e-4 a component)."""
    return bool(((np.asarray(got) * want).sum(1) > 0.9999).all())


@pytest.fixture(scope="module")
def alone(nomic_path):
    srv = Server(nomic_path, *ARGS, alone=True, start_timeout=180)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def expected(alone) -> np.ndarray:
    """The served vectors of TEXTS, through OpenAI's float encoding."""
    r = alone.client().embeddings.create(model=NAME, input=TEXTS, encoding_format="float")
    return np.array([d.embedding for d in r.data])


def test_both_clients_get_the_same_real_embeddings(alone, expected):
    assert_each_pair_nearest(expected)
    assert expected.shape == (12, 768) and np.allclose(np.linalg.norm(expected, axis=1), 1, atol=1e-5)
    b64 = alone.client().embeddings.create(model="text-embedding-3-small", input=TEXTS)  # base64, decoded
    assert (
        np.allclose([d.embedding for d in b64.data], expected, atol=1e-6) and b64.usage.prompt_tokens > 12 * 8
    )
    o = ollama.Client(host=alone.url, timeout=120)
    e = o.embed(model=f"{NAME}:latest", input=TEXTS)
    assert np.allclose(e.embeddings, expected, atol=1e-5) and e.prompt_eval_count == b64.usage.prompt_tokens
    old = o.embeddings(model=NAME, prompt=TEXTS[0]).embedding  # the older /api/embeddings
    assert same([old], expected[:1])
    assert o.show(NAME).capabilities == ["embedding"]
    listed = alone.client().models.list().data
    assert [m.id for m in listed] == [NAME]


def test_generation_is_one_clear_error_in_each_dialect(alone):
    with pytest.raises(openai.BadRequestError, match="is an embedding model") as e:
        alone.client().chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}])
    assert e.value.code == "model_not_generative" and REFUSED in e.value.message
    with pytest.raises(openai.BadRequestError, match="is an embedding model"):
        alone.client().completions.create(model=NAME, prompt="Once upon", max_tokens=4)
    with pytest.raises(ollama.ResponseError) as oe:
        ollama.Client(host=alone.url).chat(model=NAME, messages=[{"role": "user", "content": "Hi"}])
    assert oe.value.status_code == 400 and REFUSED in oe.value.error
    r = httpx.post(alone.url + "/v1/messages", timeout=30, json={
        "model": NAME, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})  # fmt: skip
    assert r.status_code == 400 and REFUSED in r.json()["error"]["message"]
    assert alone.health()["status"] == "ok"  # and the server goes on serving embeddings
    assert httpx.get(alone.url + "/metrics", timeout=10).status_code == 200
    (ps,) = ollama.Client(host=alone.url).ps().models
    assert ps.model == f"{NAME}:latest" and ps.context_length == 512  # its --embed-ctx


@pytest.mark.slow  # loads the stand-in pair beside it
def test_beside_a_pair_in_the_router(tmp_path, nomic_path, standin_pair, expected):
    (tmp_path / "standin").symlink_to(standin_pair.parent)
    (tmp_path / nomic_path.name).symlink_to(nomic_path)
    srv = Server(tmp_path, *ARGS, "--models-max", "2", "--max-tokens", "4", start_timeout=180)
    try:
        client = srv.client()
        r = client.embeddings.create(model=NAME, input=TEXTS)
        assert np.allclose([d.embedding for d in r.data], expected, atol=1e-5)
        chat = client.chat.completions.create(model="standin", messages=[{"role": "user", "content": "Hi"}],
                                              temperature=0)  # fmt: skip
        assert chat.choices[0].message.content and chat.usage.completion_tokens <= 4
        with pytest.raises(openai.BadRequestError, match="is an embedding model"):
            client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}])
        e = ollama.Client(host=srv.url, timeout=120).embed(model=NAME, input=TEXTS[:2])
        assert same(e.embeddings, expected[:2])  # with the pair loaded too
        states = {
            m["id"]: m["status"]["value"] for m in httpx.get(srv.url + "/models", timeout=10).json()["data"]
        }
        assert states == {NAME: "loaded", "standin": "loaded"}
    finally:
        srv.stop()
