"""`n` choices from a real `localspec serve` through the official `openai` client: distinct samples
indexed 0..n-1, each the n=1 answer with seed + i, streamed or not, and the prompt's cache shared
across the slots (evaluated once, as the metrics and each choice's timings say)."""

from __future__ import annotations

import secrets

import pytest

from ..helpers import Server

ASK = [{"role": "user", "content": "Tell me a short story about a robot and a cat."}]
SAMPLED = {"temperature": 1.0, "seed": 11, "max_tokens": 16}


@pytest.fixture(scope="module")
def server(smollm2_path):
    srv = Server(smollm2_path, "--parallel", "3")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def model_id(server) -> str:
    return server.client().models.list().data[0].id


def _streamed(client, **kw):
    """Each index's text and its final timings, from one streamed request."""
    text: dict[int, str] = {}
    timings: dict[int, dict] = {}
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text[c.index] = text.get(c.index, "") + (c.delta.content or "")
            if (chunk.model_extra or {}).get("timings"):  # llama-server's place: on the closing chunk
                timings[c.index] = chunk.model_extra["timings"]
    return text, timings


def test_n_sampled_choices_equal_their_single_requests(server, model_id):
    client = server.client()
    singles = [
        client.chat.completions.create(model=model_id, messages=ASK, **(SAMPLED | {"seed": 11 + i}))
        .choices[0]
        .message.content
        for i in range(3)
    ]
    r = client.chat.completions.create(model=model_id, messages=ASK, n=3, **SAMPLED)
    assert [c.index for c in r.choices] == [0, 1, 2]
    got = [c.message.content for c in r.choices]
    assert len(set(got)) == 3  # three samples, not one thrice
    assert got == singles
    assert (
        r.usage.prompt_tokens
        == client.chat.completions.create(model=model_id, messages=ASK, max_tokens=1).usage.prompt_tokens
    )  # the prompt once, as OpenAI counts it
    text, _ = _streamed(client, model=model_id, messages=ASK, n=3, **SAMPLED)
    assert sorted(text) == [0, 1, 2] and [text[i] for i in range(3)] == singles


def test_n_choices_evaluate_a_new_prompt_once(server, model_id):
    client = server.client()
    fresh = [{"role": "user", "content": f"Describe the colour {secrets.token_hex(8)} in a few words."}]
    before = server.metrics()
    text, timings = _streamed(client, model=model_id, messages=fresh, n=3, **SAMPLED)
    after = server.metrics()
    # (not: three different texts - the random word makes them a draw, and two 16-token answers that
    # copy it can agree; that the choices are their seeds' answers is the test above)
    assert sorted(timings) == [0, 1, 2] and all(text.values())
    n_prompt = timings[0]["prompt_n"]
    evaluated = sorted(t["prompt_n"] - t["cache_n"] for t in timings.values())
    # the first choice evaluated what no slot held (its hex word at least); the others copied the
    # whole prompt but the token their first verify batch evaluates
    assert evaluated[:2] == [1, 1] and 8 < evaluated[2] <= n_prompt
    delta = after["localspec:prompt_tokens_evaluated_total{role=target}"] - before.get(
        "localspec:prompt_tokens_evaluated_total{role=target}", 0
    )
    assert delta == sum(evaluated) < n_prompt + 3
    assert after["vllm:prompt_tokens_total"] - before.get("vllm:prompt_tokens_total", 0) == 3 * n_prompt
