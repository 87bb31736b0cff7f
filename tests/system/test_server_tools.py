"""Tool calls, reasoning, logprobs, penalties and the small endpoints, through the official `openai`
client against a real `localspec serve` (SmolLM2 drafting for itself; its template knows no tools,
so calls take the generic JSON format, and the constraint makes even this 135M model's calls
valid)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from ..helpers import Server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time now in a time zone",
        "parameters": {
            "type": "object",
            "properties": {
                "zone": {"type": "string"},
                "hours": {"type": "integer", "minimum": 0, "maximum": 23},
            },
            "required": ["zone"],
        },
    },
}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(smollm2_path):
    srv = Server(smollm2_path, "--parallel", "2", "--max-tokens", "64")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def model_id(server):
    return server.health()["model"]


def _valid(call) -> dict:  # noqa: ANN001
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name])
    return args


@pytest.mark.parametrize("temperature, seed", [(0.0, 0), (0.8, 1), (0.8, 2)])
def test_a_forced_call_validates(client, model_id, temperature, seed):
    r = client.chat.completions.create(
        model=model_id, messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
        temperature=temperature, seed=seed,
    )  # fmt: skip
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls and choice.message.content is None
    for call in choice.message.tool_calls:
        _valid(call)
        assert call.id.startswith("call_") and call.type == "function"


def test_a_named_function_is_the_one_called(client, model_id):
    r = client.chat.completions.create(
        model=model_id, messages=ASK, tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}}, temperature=0.7, seed=3,
    )  # fmt: skip
    calls = r.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"] * len(calls) and calls
    _valid(calls[0])


def test_automatic_choice_calls_validly_or_answers(client, model_id):
    called = 0
    for seed in range(4):
        r = client.chat.completions.create(
            model=model_id, messages=ASK, tools=[WEATHER], temperature=0.8, seed=seed
        )
        choice = r.choices[0]
        if choice.message.tool_calls:
            called += 1
            assert choice.finish_reason == "tool_calls"
            _valid(choice.message.tool_calls[0])
        else:
            assert choice.message.content  # the other branch of the format: a reply
    greedy = client.chat.completions.create(model=model_id, messages=ASK, tools=[WEATHER], temperature=0)
    assert greedy.choices[0].message.tool_calls, "the weather question makes this model call the tool"
    assert called >= 1


def test_tool_choice_none_gives_prose(client, model_id):
    r = client.chat.completions.create(
        model=model_id, messages=ASK, tools=[WEATHER], tool_choice="none", temperature=0
    )
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content


def test_streamed_deltas_assemble_to_the_non_streamed_call(client, model_id):
    kw = dict(
        model=model_id, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=0.8, seed=7
    )
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls
    calls: dict[int, dict] = {}
    finish = None
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                if d.id is not None:  # the first piece of a call: its id and name, once
                    assert d.index not in calls and d.function.name
                    calls[d.index] = {"name": d.function.name, "arguments": ""}
                else:
                    assert d.function.name is None
                calls[d.index]["arguments"] += d.function.arguments or ""
    assert finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == [
        (c.function.name, c.function.arguments) for c in whole
    ]
    assert sum(1 for _ in calls) >= 1


def test_a_tool_result_round_trip(client, model_id):
    first = client.chat.completions.create(
        model=model_id, messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0
    ).choices[0].message  # fmt: skip
    call = first.tool_calls[0]
    history = ASK + [
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})},
    ]
    r = client.chat.completions.create(model=model_id, messages=history, tools=[WEATHER], temperature=0)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason in ("stop", "tool_calls")
    assert msg.content or msg.tool_calls


def test_tools_and_results_reach_the_template(server, model_id):
    """The prompt the model saw (usage.prompt_tokens grows with the tools' text and the result)."""
    c = server.client()
    plain = c.chat.completions.create(model=model_id, messages=ASK, max_tokens=1).usage.prompt_tokens
    tooled = c.chat.completions.create(
        model=model_id, messages=ASK, tools=[WEATHER], max_tokens=1
    ).usage.prompt_tokens
    assert tooled > plain + 40


GRAMMAR_THINK = 'start: "<think>" /[a-z ]{3,30}/ "</think>" /[A-Z][a-z ]{2,30}/'


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_is_separated_or_kept_inline(client, model_id, stream):
    kw = dict(model=model_id, messages=ASK, temperature=0, extra_body={"grammar": GRAMMAR_THINK})

    def ask(fmt: str) -> tuple[str, str]:
        body = kw | {"extra_body": kw["extra_body"] | {"reasoning_format": fmt}}
        if not stream:
            m = client.chat.completions.create(**body).choices[0].message
            return (getattr(m, "reasoning_content", None) or ""), m.content or ""
        reasoning = content = ""
        for chunk in client.chat.completions.create(**body, stream=True):
            for c in chunk.choices:
                reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
                content += c.delta.content or ""
        return reasoning, content

    reasoning, content = ask("deepseek")
    inline_reasoning, inline = ask("none")
    assert reasoning and content and not content.startswith("<think>")
    assert inline_reasoning == "" and inline == f"<think>{reasoning}</think>{content}"


def test_logprobs_with_speculation_equal_plain_decodings(client, model_id):
    kw = dict(model=model_id, messages=[{"role": "user", "content": "Name three colours."}], temperature=0,
              max_tokens=32, logprobs=True, top_logprobs=3)  # fmt: skip
    spec = client.chat.completions.create(**kw, extra_body={"spec": True})
    plain = client.chat.completions.create(**kw, extra_body={"spec": False})
    assert spec.model_extra["timings"]["draft_n_accepted"] > 0  # drafted tokens among them
    assert plain.model_extra["timings"]["draft_n"] == 0
    a, b = spec.choices[0].logprobs.content, plain.choices[0].logprobs.content
    assert len(a) == spec.usage.completion_tokens - (spec.choices[0].finish_reason == "stop")
    for x, y in zip(a, b):
        if x.token != y.token:  # greedy may flip at a near tie (llama.cpp is not batch-invariant)
            assert abs(x.logprob - y.logprob) < 0.1 and abs(x.top_logprobs[1].logprob - x.logprob) < 0.1
            break
        assert x.logprob == pytest.approx(y.logprob, abs=0.05)
        assert [t.token for t in x.top_logprobs][:1] == [t.token for t in y.top_logprobs][:1]


def test_completions_logprobs(client, model_id):
    r = client.completions.create(
        model=model_id, prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=2
    )
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.token_logprobs) == 4
    assert all(len(t) <= 2 and max(t.values()) <= 0 for t in lp.top_logprobs)


def test_logit_bias_changes_the_greedy_token(server, client, model_id):
    kw = dict(
        model=model_id, messages=[{"role": "user", "content": "Say hello."}], temperature=0, max_tokens=6
    )
    first = client.chat.completions.create(**kw, logprobs=True).choices[0].logprobs.content[0].token
    ids = httpx.post(server.url + "/tokenize", json={"content": first}).json()["tokens"]
    assert len(ids) == 1
    r = client.chat.completions.create(**kw, logprobs=True, logit_bias={str(ids[0]): -100})
    assert r.choices[0].logprobs.content[0].token != first
    boosted = httpx.post(server.url + "/tokenize", json={"content": " banana"}).json()["tokens"][0]
    r = client.chat.completions.create(**kw, logit_bias={str(boosted): 30})
    assert r.choices[0].message.content.startswith(" banana") or "banana" in r.choices[0].message.content


def test_penalties_change_the_answer(client, model_id):
    kw = dict(
        model=model_id,
        messages=[{"role": "user", "content": "Repeat 'the' ten times."}],
        temperature=0,
        max_tokens=24,
    )
    base = client.chat.completions.create(**kw).choices[0].message.content
    pen = (
        client.chat.completions.create(**kw, frequency_penalty=2.0, presence_penalty=1.0)
        .choices[0]
        .message.content
    )
    assert pen != base


def test_n_choices_share_one_prompt(client, model_id):
    r = client.chat.completions.create(
        model=model_id, messages=ASK, n=2, temperature=0.9, seed=5, max_tokens=12
    )
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].message.content != r.choices[1].message.content  # two samples, not one twice
    with pytest.raises(Exception, match="--parallel"):
        client.chat.completions.create(model=model_id, messages=ASK, n=3)
    seen = {0: "", 1: ""}
    for chunk in client.chat.completions.create(
        model=model_id, messages=ASK, n=2, temperature=0.9, seed=5, max_tokens=12, stream=True
    ):
        for c in chunk.choices:
            seen[c.index] += c.delta.content or ""
    assert [seen[0], seen[1]] == [c.message.content for c in r.choices]


def test_unknown_fields(server, model_id):
    ok = {"model": model_id, "messages": ASK, "max_tokens": 2}
    for harmless in ({"user": "u1"}, {"metadata": {"a": "b"}}, {"store": False}, {"service_tier": "auto"}):
        assert (
            httpx.post(server.url + "/v1/chat/completions", json=ok | harmless, timeout=60).status_code == 200
        )
    r = httpx.post(server.url + "/v1/chat/completions", json=ok | {"audio": {"voice": "x"}}, timeout=60)
    assert (
        r.status_code == 400
        and r.json()["error"]["param"] == "audio"
        and "audio" in r.json()["error"]["message"]
    )


def test_tokenize_detokenize_and_models(server, model_id):
    toks = httpx.post(server.url + "/tokenize", json={"content": "Hello world"}).json()["tokens"]
    assert httpx.post(server.url + "/detokenize", json={"tokens": toks}).json()["content"] == "Hello world"
    pieces = httpx.post(server.url + "/tokenize", json={"content": "Hello world", "with_pieces": True}).json()
    assert "".join(p["piece"] for p in pieces["tokens"]) == "Hello world"
    assert httpx.post(server.url + "/detokenize", json={"tokens": [10**9]}).status_code == 400
    card = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert card["id"] == model_id and card["max_model_len"] == card["meta"]["n_ctx"] == 1024
