"""The Responses API's own client against `localspec serve` on the stand-in pair, as its docs say to
point it at another server: the official `openai` SDK (client.responses). Streamed equals
non-streamed; a forced tool call validates against its schema and its result goes back in; structured
output validates. Greedy, one request per step, no retries. The OpenAI Agents SDK runs its tasks on
the real pair in test_apps.py."""

from __future__ import annotations

import json

import jsonschema
import pytest
from pydantic import BaseModel, Field

from ..helpers import Server

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
        "parameters": WEATHER, "strict": True}  # fmt: skip
ASK = "What is the weather in Paris?"


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=20)
    age: int = Field(ge=0, le=150)


@pytest.fixture(scope="module")
def server(standin_pair):
    srv = Server(standin_pair, "--parallel", "1", "--max-tokens", "80", start_timeout=600)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def model(server) -> str:
    return server.health()["model"]


def test_openai_sdk_streamed_equals_not_streamed(server, model):
    client = server.client()
    args = {"model": model, "input": "Write one sentence about the sea.", "max_output_tokens": 40,
            "temperature": 0, "instructions": "Answer briefly."}  # fmt: skip
    whole = client.responses.create(**args)
    # the events as they come (the SDK's stream() helper wants response.completed; a reply cut by
    # max_output_tokens ends with response.incomplete, as OpenAI's do)
    events = list(client.responses.create(**args, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert events[-1].type in ("response.completed", "response.incomplete") and final.status == whole.status
    assert whole.output_text and deltas == whole.output_text == final.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert whole.usage.input_tokens == final.usage.input_tokens > 0


def test_openai_sdk_forced_tool_call_validates_and_its_result_goes_back(server, model):
    client = server.client()
    first = client.responses.create(model=model, input=ASK, tools=[TOOL], temperature=0, max_output_tokens=60,
                                    tool_choice={"type": "function", "name": "get_weather"})  # fmt: skip
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather", first.output
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    turn = [{"role": "user", "content": ASK}, *[c.model_dump(exclude_none=True) for c in calls],
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C."}]  # fmt: skip
    second = client.responses.create(model=model, input=turn, tools=[TOOL], temperature=0, max_output_tokens=40,
                                     tool_choice="none")  # fmt: skip
    assert second.status in ("completed", "incomplete") and second.output_text.strip()
    alone = client.responses.create(model=model, input=ASK, tools=[TOOL], temperature=0, max_output_tokens=1,
                                    tool_choice="none")  # fmt: skip
    assert second.usage.input_tokens > alone.usage.input_tokens + 5  # the call and its result went in


def test_openai_sdk_structured_output_validates(server, model):
    client = server.client()
    r = client.responses.parse(model=model, input="Ann is 31 years old. Extract the person.", text_format=Person,
                               temperature=0, max_output_tokens=60)  # fmt: skip
    assert isinstance(r.output_parsed, Person) and r.output_parsed.name
