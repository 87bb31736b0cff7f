"""The official `anthropic` Python SDK against `localspec serve` on the embedded pair, pointed at it
as its docs say (base_url): streamed equals non-streamed, a forced tool call validates against its
schema and its result goes back in, structured output (`messages.parse`) validates, stop_sequences
end the text where they say, and Claude Code's fixed max_tokens is lowered to what the context holds.
SDK 2.x has no temperature argument: greedy goes in `extra_body`."""

from __future__ import annotations

from typing import Literal

import httpx
import jsonschema
import pytest
from pydantic import BaseModel

from ..bad_inputs import ANTHROPIC_BAD_BODIES
from ..helpers import SERVER_N_CTX, Server

anthropic = pytest.importorskip("anthropic")

GREEDY = {"temperature": 0}
MODEL = "claude-sonnet-4-5"  # a name the server does not serve: the loaded model answers
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
        "required": ["city", "unit"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class Capital(BaseModel):
    # enums, not lengths: the SDK moves keywords Anthropic's API does not enforce (maxLength) into
    # the description, so a 135M-quality model's strings would be unbounded
    city: Literal["Paris", "Rome", "Madrid"]
    country: Literal["France", "Italy", "Spain"]


@pytest.fixture(scope="module")
def server(standin_pair):
    srv = Server(standin_pair, "--parallel", "1", start_timeout=600)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="sk-local", max_retries=0, timeout=1200)


def test_streamed_equals_non_streamed(client):
    kw = dict(model=MODEL, max_tokens=40, messages=[{"role": "user", "content": "Name three colors."}])
    whole = client.messages.create(**kw, extra_body=GREEDY)
    with client.messages.stream(**kw, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        streamed = stream.get_final_message()
    assert whole.content[0].type == "text" and whole.content[0].text
    assert text == whole.content[0].text == streamed.content[0].text
    assert (streamed.stop_reason, streamed.usage.output_tokens) == (
        whole.stop_reason,
        whole.usage.output_tokens,
    )
    assert whole.model == MODEL or whole.model  # the served model's name comes back


def test_a_stop_sequence_ends_the_text_where_it_says(client):
    kw = dict(model=MODEL, max_tokens=40, messages=[{"role": "user", "content": "Count from 1 to 20."}])
    text = client.messages.create(**kw, extra_body=GREEDY).content[0].text
    words = text.split()
    assert len(words) > 3, text
    stop = words[len(words) // 2]
    cut = client.messages.create(**kw, stop_sequences=[stop], extra_body=GREEDY)
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", stop)
    assert text.startswith(cut.content[0].text) and stop not in cut.content[0].text


def test_a_forced_tool_call_validates_and_its_result_goes_back(client):
    tool_choice = {"type": "tool", "name": "get_weather"}
    msg = client.messages.create(
        model=MODEL, max_tokens=64, messages=ASK, tools=[WEATHER], tool_choice=tool_choice, extra_body=GREEDY
    )
    (call,) = [b for b in msg.content if b.type == "tool_use"]
    assert msg.stop_reason == "tool_use" and call.name == "get_weather" and call.id
    jsonschema.validate(call.input, WEATHER["input_schema"])
    turns = [
        *ASK,
        {"role": "assistant", "content": msg.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18 C, sunny"}],
        },
    ]
    answer = client.messages.create(
        model=MODEL, max_tokens=40, messages=turns, tools=[WEATHER], extra_body=GREEDY
    )
    assert answer.content and answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0) > (
        msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)
    )  # the call and its result are in the prompt


def test_structured_output_validates(client):
    parsed = client.messages.parse(
        model=MODEL, max_tokens=60, output_format=Capital, extra_body=GREEDY,
        messages=[{"role": "user", "content": "Paris is the capital of France. Give the city and its country."}],
    )  # fmt: skip
    assert isinstance(parsed.parsed_output, Capital) and parsed.stop_reason == "end_turn"


def test_claude_codes_max_tokens_is_lowered_to_what_fits(client):
    msg = client.messages.create(
        model=MODEL, max_tokens=64000, messages=[{"role": "user", "content": "Hi"}], extra_body=GREEDY
    )
    assert msg.stop_reason in ("end_turn", "model_context_window_exceeded")
    assert msg.usage.input_tokens + msg.usage.output_tokens <= SERVER_N_CTX


def test_count_tokens_is_the_prompt_the_model_reads(client):
    counted = client.messages.count_tokens(model=MODEL, messages=ASK, tools=[WEATHER])
    msg = client.messages.create(model=MODEL, max_tokens=1, messages=ASK, tools=[WEATHER], extra_body=GREEDY)
    assert counted.input_tokens == msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)


def test_errors_come_as_the_sdks_exceptions(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1/x.png"}}]}])  # fmt: skip
    assert (
        "'url' are not read" in e.value.message and e.value.body["error"]["type"] == "invalid_request_error"
    )


@pytest.mark.parametrize(
    ("case", "body", "words"), ANTHROPIC_BAD_BODIES, ids=[c[0] for c in ANTHROPIC_BAD_BODIES]
)
def test_bad_bodies_get_a_clear_400_in_anthropics_shape(server, case, body, words):
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 400, (case, r.text)
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"] and "Traceback" not in r.text
