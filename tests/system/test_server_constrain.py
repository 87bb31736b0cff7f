"""Structured output through a real `localspec serve` and the official openai client: response_format
(json_schema, json_object), `client.chat.completions.parse` with a pydantic model, llama-server's
`grammar`, streaming and not, greedy and sampled. Every finished answer validates."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pydantic
import pytest

from tests.helpers import Server

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": {"enum": ["Paris", "London", "Tokyo", "other"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Marie is 34 and lives in Paris. Give her details as JSON."}]


def _fmt(schema: dict, strict: bool = True) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": strict}}


@pytest.fixture(scope="module")
def server(smollm2_path):
    srv = Server(smollm2_path, "--parallel", "2", "--max-tokens", "64", "--n-threads", "1")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


@pytest.mark.parametrize("temperature,seed", [(0.0, 0), (0.8, 1), (0.8, 2), (1.2, 3)])
def test_json_schema_answers_validate(client, model_id, temperature, seed):
    r = client.chat.completions.create(
        model=model_id, messages=ASK, response_format=_fmt(PERSON), temperature=temperature, seed=seed
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    jsonschema.validate(json.loads(choice.message.content), PERSON)
    sources = r.model_extra["timings"]["draft_sources"]
    assert sources["grammar"]["drafted"] > 0  # keys, quotes and braces came as free drafts


def test_streamed_equals_non_streamed_and_validates(client, model_id):
    kw = dict(model=model_id, messages=ASK, response_format=_fmt(PERSON), temperature=0)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    parts, finish = [], None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(parts) == whole and finish == "stop"
    jsonschema.validate(json.loads(whole), PERSON)


def test_json_mode_gives_an_object(client, model_id):
    for seed in range(2):
        r = client.chat.completions.create(
            model=model_id,
            messages=ASK,
            response_format={"type": "json_object"},
            temperature=0.9,
            seed=seed,
            max_tokens=48,
        )
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict)
        else:  # the budget ran out inside the object: said, not hidden
            assert r.choices[0].finish_reason == "length"


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    age: int = pydantic.Field(ge=0, le=130)
    city: str = pydantic.Field(max_length=20)


def test_parse_with_a_pydantic_model(client, model_id):
    r = client.chat.completions.parse(model=model_id, messages=ASK, response_format=Person, temperature=0)
    person = r.choices[0].message.parsed
    assert isinstance(person, Person) and 0 <= person.age <= 130


def test_completions_with_a_gbnf_grammar_and_a_schema(client, model_id):
    gbnf = 'root ::= "The answer is " ("yes" | "no") "."'
    r = client.completions.create(
        model=model_id, prompt="Is the sky blue?", temperature=0.7, seed=4, extra_body={"grammar": gbnf}
    )
    assert re.fullmatch(r"The answer is (yes|no)\.", r.choices[0].text), r.choices[0].text
    r = client.completions.create(
        model=model_id,
        prompt="Marie, 34, Paris:",
        temperature=0,
        extra_body={"response_format": _fmt(PERSON)},
    )
    jsonschema.validate(json.loads(r.choices[0].text), PERSON)


@pytest.mark.parametrize(
    "extra,needle",
    [
        ({"response_format": _fmt({"type": "strin"})}, "Invalid type: strin"),
        ({"response_format": _fmt({"type": "string", "format": "nope"})}, "Unknown format: nope"),
        ({"response_format": {"type": "json_schema"}}, "needs a json_schema object"),
        ({"grammar": 'root ::= "a" b'}, "Rule 'b' not found"),
        ({"grammar": "root ::= x", "response_format": {"type": "json_object"}}, "not both"),
        (
            {"response_format": _fmt({"type": "object", "properties": {f"k{i}": {} for i in range(9000)}})},
            "the limit is 65536 bytes",
        ),
    ],
)
def test_bad_constraints_are_400s_naming_the_problem(client, model_id, extra, needle):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=ASK, extra_body=extra, max_tokens=8)
    assert needle in e.value.body["message"], e.value.body


def test_non_strict_schema_ignores_what_it_cannot_enforce(client, model_id):
    schema = {
        "type": "object",
        "properties": {"d": {"type": "string", "format": "nope", "maxLength": 8}},
        "required": ["d"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=model_id, messages=ASK, response_format=_fmt(schema, strict=False), temperature=0
    )
    assert r.choices[0].finish_reason == "stop"
    assert len(json.loads(r.choices[0].message.content)["d"]) <= 8  # what it can enforce, it does


def test_concurrent_requests_each_follow_their_own_schema(client, model_id):
    from concurrent.futures import ThreadPoolExecutor

    label = {
        "type": "object",
        "properties": {
            "label": {"enum": ["good", "bad"]},
            "score": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["label", "score"],
        "additionalProperties": False,
    }
    jobs = [
        (PERSON, ASK),
        (label, [{"role": "user", "content": "Rate this film: 'a triumph'. As JSON."}]),
    ] * 2

    def one(job):
        schema, messages = job
        r = client.chat.completions.create(
            model=model_id, messages=messages, response_format=_fmt(schema), temperature=0.7, seed=5
        )
        return schema, r.choices[0]

    with ThreadPoolExecutor(4) as pool:
        for schema, choice in pool.map(one, jobs):
            assert choice.finish_reason == "stop"
            jsonschema.validate(json.loads(choice.message.content), schema)
