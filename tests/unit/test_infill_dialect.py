"""Fill-in-the-middle on the fake engine: llama-server's /infill as llama.vim and llama.vscode send
it (their request bodies, from their sources), OpenAI's suffix and Ollama's suffix and raw FIM
prompts, all into the one FIM request; llama-server's /completion shape out."""

from __future__ import annotations

import json

import pytest

from localspec.serving.fim import Extra, Fill

from ..fake_engine import answer

# llama.vim's s:fim request (autoload/llama.vim), with one ring-buffer chunk
LLAMA_VIM = {
    "input_prefix": "def add(a, b):\n", "input_suffix": "\n\nprint(add(1, 2))\n",
    "input_extra": [{"text": "import math\n", "time": [1, 2], "filename": "util.py"}],
    "prompt": "    ", "n_predict": 128, "n_indent": 4, "top_k": 40, "top_p": 0.99, "stream": False,
    "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
    "t_max_predict_ms": 1500,
    "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached"],
}  # fmt: skip
# llama.vscode's createRequestPayload(noPredict=true): the warm-up of the extra context
LLAMA_VSCODE_WARMUP = {
    "input_prefix": "", "input_suffix": "", "input_extra": [{"text": "x = 1\n", "filename": "a.py"}],
    "prompt": "", "n_predict": 0, "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500,
    "t_max_predict_ms": 1,
}  # fmt: skip


def test_llama_vims_request_becomes_the_fim_request(client, fake):
    fake.queue(*answer("    return a + b\n"))
    r = client.post("/infill", json=LLAMA_VIM)
    assert r.status_code == 200, r.text
    req, s = fake.requests[-1], fake.settings[-1]
    assert req.fill == Fill(
        LLAMA_VIM["input_prefix"], LLAMA_VIM["input_suffix"], (Extra("import math\n", "util.py"),), "    "
    )
    assert (s.max_tokens, s.n_indent, s.t_max_predict_ms, s.infill) == (128, 4, 1500, True)
    # its chain names no min-p and no temperature: both off, as llama-server runs it
    assert (s.top_k, s.top_p, s.min_p, s.temperature) == (40, 0.99, 0.0, 1.0)
    body = r.json()  # only the response_fields, under their paths
    assert body == {"content": "    return a + b\n", "timings/prompt_n": 7, "timings/predicted_n": 17,
                    "truncated": False, "tokens_cached": 7 + 17}  # fmt: skip


def test_the_whole_completion_object(client, fake):
    fake.queue(*answer("x", stop_string="\n\n"))
    body = client.post("/infill", json={"input_prefix": "a", "input_suffix": "b"}).json()
    assert body["content"] == "x" and body["stop"] is True and body["stop_type"] == "word"
    assert body["stopping_word"] == "\n\n" and body["tokens_evaluated"] == 7 and body["tokens_predicted"] == 1
    assert {"prompt_n", "predicted_per_second", "draft_n", "draft_n_accepted"} <= set(body["timings"])
    fake.queue(*answer("y", finish="length"))
    assert (
        client.post("/infill", json={"input_prefix": "a", "input_suffix": "b"}).json()["stop_type"] == "limit"
    )
    assert (
        client.post("/infill", json={"input_prefix": "a", "input_suffix": "b"}).json()["stop_type"] == "eos"
    )
    assert fake.settings[-1].infill is False  # no samplers: llama-server's default chain, no infill


def test_the_warm_up_evaluates_the_prompt_and_answers_empty(client, fake):
    r = client.post("/infill", json=LLAMA_VSCODE_WARMUP)
    assert r.status_code == 200 and r.json()["content"] == ""
    s = fake.settings[-1]
    assert s.max_tokens == 1 and (s.top_k, s.top_p, s.min_p, s.infill) == (0, 1.0, 0.0, False)
    assert s.t_max_predict_ms == 1


def test_a_streamed_infill(client, fake):
    fake.queue(*answer("abcd"))
    r = client.post("/infill", json={"input_prefix": "a", "input_suffix": "b", "stream": True})
    frames = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    assert [f["content"] for f in frames] == ["ab", "cd", ""]
    assert [f["stop"] for f in frames] == [False, False, True] and frames[-1]["stop_type"] == "eos"


@pytest.mark.parametrize(
    "body, param",
    [({"input_suffix": "b"}, "input_prefix"), ({"input_prefix": "a", "input_suffix": "b", "samplers": ["nope"]}, "samplers"),
     ({"input_prefix": "a", "input_suffix": "b", "lora": [{"id": 0, "scale": 0.5}]}, "lora"),
     ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "x"}]}, None)],
)  # fmt: skip
def test_what_infill_refuses(client, fake, body, param):
    r = client.post("/infill", json=body)
    assert r.status_code in (400, 422) and not fake.requests
    if param:
        assert param in r.text


def test_openai_suffix_is_fill_in_the_middle(client, fake):
    r = client.post("/v1/completions", json={"prompt": "def f(", "suffix": "):\n", "max_tokens": 8})
    assert r.status_code == 200 and fake.requests[-1].fill == Fill("def f(", "):\n")
    assert fake.requests[-1].prompt is None and not fake.requests[-1].chat


def test_ollama_suffix_and_raw_fim_prompts(client, fake):
    r = client.post("/api/generate", json={"model": "fake", "prompt": "a", "suffix": "b", "stream": False})
    assert r.status_code == 200 and fake.requests[-1].fill == Fill("a", "b")
    raw = "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"
    client.post("/api/generate", json={"model": "fake", "prompt": raw, "raw": True, "stream": False})
    req = fake.requests[-1]
    assert req.prompt == raw and req.special and req.fill is None
