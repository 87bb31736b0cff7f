"""OpenAI's Responses dialect on the fake engine: what a body becomes (the internal request, its
Settings), and what events become on the wire - one response object, or the typed event stream -
each checked against the openai SDK's own types; errors in OpenAI's shape."""

from __future__ import annotations

import json

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from localspec.serving import APIError

from ..fake_engine import answer
from ..helpers import sse_frames

URL = "/v1/responses"
EVENT = TypeAdapter(ResponseStreamEvent)
FN = {"type": "function", "name": "get", "parameters": {"type": "object"}, "strict": False}


def events(r) -> list[dict]:
    """The stream's events, each checked against the SDK's types and its `event:` line."""
    out = [data for _, data in sse_frames(r.text)]
    for data in out:
        EVENT.validate_python(data)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


def without_ids(items: list[dict]) -> list[dict]:
    return [{k: v for k, v in i.items() if k != "id"} for i in items]


def test_a_body_becomes_the_internal_request(client, fake):
    body = {
        "model": "fake", "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "Use "}, {"type": "input_text", "text": "tools."}]},
            {"type": "message", "role": "user", "content": "Weather?", "id": "msg_1"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Look it up."}],
             "encrypted_content": None},
            {"type": "message", "role": "assistant", "status": "completed", "content": [
                {"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get", "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "call_id": "call_b", "name": "spawn", "namespace": "agents", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "ok"}]},
        ],
        "tools": [FN, {"type": "namespace", "name": "agents", "description": "d", "tools": [
            {"type": "function", "name": "spawn", "parameters": {"type": "object"}}]},
            {"type": "web_search", "external_web_access": False}, {"type": "custom", "name": "patch"}],
        "tool_choice": {"type": "function", "name": "get"}, "parallel_tool_calls": False,
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": True}},
        "max_output_tokens": 9, "temperature": 0, "top_p": 0.5, "stop": "END", "reasoning": {"effort": "none", "summary": "auto"},
        "store": False, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k", "client_metadata": {"a": "b"},
    }  # fmt: skip
    r = client.post(URL, json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-localspec-ignored-tools"] == "web_search"
    req, s = fake.requests[-1], fake.settings[-1]
    assert [m.role for m in req.messages] == ["system", "system", "user", "assistant", "tool", "tool"]
    # a message's text parts: a line each
    assert [m.content for m in req.messages[:3]] == ["Be brief.", "Use \ntools.", "Weather?"]
    a = req.messages[3]
    assert (a.content, a.reasoning) == ("Checking.", "Look it up.")
    assert [(c.id, c.name, c.arguments) for c in a.tool_calls] == [
        ("call_a", "get", '{"city": "Paris"}'), ("call_b", "agents.spawn", "{}")]  # fmt: skip
    assert [(m.tool_call_id, m.content) for m in req.messages[4:]] == [("call_a", "sunny"), ("call_b", "ok")]
    assert [t.name for t in req.tools] == ["get", "agents.spawn", "patch"]
    assert req.tools[2].parameters["properties"] == {"input": {"type": "string"}}
    assert (req.tool_choice, req.forced_tool, req.parallel_tool_calls) == ("required", "get", False)
    assert req.reasoning is False and not req.stream and req.model == "fake"
    assert (s.max_tokens, s.temperature, s.top_p, s.stop) == (9, 0.0, 0.5, ("END",))
    assert json.loads(s.json_schema) == {"type": "object"} and s.json_strict is True
    assert not req.clamp_max_tokens  # a limit the client set is kept: past the context, a 400


def test_no_max_output_tokens_runs_until_the_end_of_text_or_the_context(client, fake):
    # as OpenAI, llama-server, vLLM and Ollama: not the server's --max-tokens (Codex sends no limit,
    # and took the cut answer for an error); the model lowers this to the room the prompt leaves
    fake.queue(*answer("hi"))
    assert client.post(URL, json={"input": "Hi"}).status_code == 200
    req, s = fake.requests[-1], fake.settings[-1]
    assert req.clamp_max_tokens and s.max_tokens == 1 << 24


def test_output_no_call_asked_for_goes_by_its_tools_name(client, fake):
    # Codex 0.171's request after SmolLM2 called create_goal (captured from a real run): it adds its
    # goal as a tool's output with no call_id, named by the tool (and namespace) it comes from
    goal = '{"objective":"create_goal","token_budget":100}'
    body = {
        "model": "fake", "stream": True, "tools": [FN],
        "input": [
            {"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": "Reply with one word: hello."}]},
            {"type": "function_call", "status": "completed", "id": "fc_1", "name": "create_goal", "arguments": goal, "call_id": "call_z"},
            {"type": "function_call_output", "id": "fco_1", "call_id": "call_z", "output": '{"goal":{"status":"active"}}'},
            {"type": "function_call_output", "id": "fco_2", "name": "goal_objective", "namespace": "agent", "output": "create_goal"},
        ],
    }  # fmt: skip
    fake.queue(*answer("hello"))
    r = client.post(URL, json=body)
    assert r.status_code == 200, r.text
    assert events(r)[-1]["type"] == "response.completed"
    out = fake.requests[-1].messages[-2:]
    assert [(m.role, m.tool_call_id, m.name, m.content) for m in out] == [
        ("tool", "call_z", None, '{"goal":{"status":"active"}}'), ("tool", None, "agent.goal_objective", "create_goal")]  # fmt: skip


def test_a_string_input_and_allowed_tools(client, fake):
    body = {"input": "Hi", "tools": [FN, {**FN, "name": "put"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "put"}]},
            "text": {"format": {"type": "json_object"}}, "include": ["message.output_text.logprobs"], "top_logprobs": 2}  # fmt: skip
    assert client.post(URL, json=body).status_code == 200
    req, s = fake.requests[-1], fake.settings[-1]
    assert [(m.role, m.content) for m in req.messages] == [("user", "Hi")]
    assert [t.name for t in req.tools] == ["put"] and req.tool_choice == "required"
    assert json.loads(s.json_schema) == {"type": "object"} and s.logprobs and s.top_logprobs == 2


def test_a_whole_answer(client, fake):
    fake.queue(*answer("Hello", reasoning="Think.", prompt_tokens=4))
    body = client.post(URL, json={"input": "Hi"}).json()
    Response.model_validate(body)
    assert body["id"].startswith("resp_") and body["object"] == "response" and body["status"] == "completed"
    reasoning, message = body["output"]
    assert reasoning["type"] == "reasoning" and reasoning["content"] == [
        {"type": "reasoning_text", "text": "Think."}
    ]
    assert message["role"] == "assistant" and message["content"][0]["text"] == "Hello"
    assert body["usage"] == {
        "input_tokens": 4, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 4}, "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 9,
    }  # fmt: skip
    assert body["timings"]["draft_n"] == 6 and body["timings"]["draft_n_accepted"] == 4


def test_streamed_equals_whole_and_follows_the_documented_order(client, fake):
    fake.queue(*answer("Hello", reasoning="Think."))
    whole = client.post(URL, json={"input": "Hi"}).json()
    fake.queue(*answer("Hello", reasoning="Think."))
    ev = events(client.post(URL, json={"input": "Hi", "stream": True}))
    assert [e["type"] for e in ev] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    assert ev[0]["response"]["status"] == "in_progress" and ev[0]["response"]["output"] == []
    assert "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta") == "Hello"
    assert ev[-1]["response"]["output"] == [e["item"] for e in ev if e["type"] == "response.output_item.done"]
    assert without_ids(ev[-1]["response"]["output"]) == without_ids(whole["output"])
    assert ev[-1]["response"]["usage"] == whole["usage"]


def test_tool_calls_streamed_and_whole(client, fake):
    tools = [FN, {"type": "namespace", "name": "agents", "description": "d", "tools": [{**FN, "name": "spawn"}]},
             {"type": "custom", "name": "patch", "description": "a patch"}]  # fmt: skip
    calls = [("get", '{"city": "Paris"}'), ("agents.spawn", "{}"), ("patch", '{"input": "*** Begin"}')]
    fake.queue(*answer(calls=calls))
    whole = client.post(URL, json={"input": "Hi", "tools": tools}).json()
    Response.model_validate(whole)
    get, spawn, patch = whole["output"]
    assert (get["type"], get["name"], get["arguments"], get["call_id"]) == (
        "function_call", "get", '{"city": "Paris"}', "call_0_0")  # fmt: skip
    assert (spawn["name"], spawn["namespace"]) == ("spawn", "agents")
    assert (patch["type"], patch["name"], patch["input"]) == ("custom_tool_call", "patch", "*** Begin")
    fake.queue(*answer(calls=calls))
    ev = events(client.post(URL, json={"input": "Hi", "tools": tools, "stream": True}))
    added = [e["item"] for e in ev if e["type"] == "response.output_item.added"]
    assert [(i["type"], i["status"]) for i in added][0] == ("function_call", "in_progress")
    args = "".join(e["delta"] for e in ev if e["type"] == "response.function_call_arguments.delta")
    assert args.startswith('{"city": "Paris"}')
    done = [e for e in ev if e["type"] == "response.function_call_arguments.done"]
    assert [d["arguments"] for d in done] == ['{"city": "Paris"}', "{}"]
    assert without_ids(ev[-1]["response"]["output"]) == without_ids(whole["output"])


def test_a_cut_answer_is_incomplete(client, fake):
    fake.queue(*answer("Hel", finish="length"))
    body = client.post(URL, json={"input": "Hi", "max_output_tokens": 3}).json()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    fake.queue(*answer("Hel", finish="length"))
    ev = events(client.post(URL, json={"input": "Hi", "stream": True}))
    assert ev[-1]["type"] == "response.incomplete" and ev[-1]["response"]["status"] == "incomplete"


def test_an_empty_answer_still_has_its_message(client, fake):
    fake.queue(*answer(""))
    whole = client.post(URL, json={"input": "Hi"}).json()
    fake.queue(*answer(""))
    ev = events(client.post(URL, json={"input": "Hi", "stream": True}))
    assert without_ids(ev[-1]["response"]["output"]) == without_ids(whole["output"])
    assert whole["output"][0]["content"][0]["text"] == ""


def test_logprobs_when_included(client, fake):
    fake.queue(*answer("Hi", logprobs=True))
    body = client.post(URL, json={"input": "x", "include": ["message.output_text.logprobs"]}).json()
    assert [lp["token"] for lp in body["output"][0]["content"][0]["logprobs"]] == ["H", "i"]
    fake.queue(*answer("Hi", logprobs=True))
    ev = events(client.post(URL, json={"input": "x", "stream": True, "top_logprobs": 1}))
    assert [lp["token"] for e in ev if e["type"] == "response.output_text.delta" for lp in e["logprobs"]] == [
        "H",
        "i",
    ]


def test_errors_take_openai_shape(client, fake):
    def error(body, status=400):
        r = client.post(URL, json=body)
        assert r.status_code == status, r.text
        return r.json()["error"]

    assert error({"input": "Hi", "conversation": "c"})["param"] == "conversation"
    e = error({"input": "Hi", "previous_response_id": "resp_1"})
    assert e["param"] == "previous_response_id" and "whole conversation" in e["message"]
    e = error({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})
    assert e["param"] == "input.0.content.0.image_url" and "data URL" in e["message"]
    e = error({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]})
    assert e["param"] == "input.0.content.0.type"
    assert error({"input": [{"type": "item_reference", "id": "msg_1"}]})["param"] == "input.0"
    e = error({"input": [{"type": "function_call_output", "output": "x"}]})
    assert e["param"] == "input.0.call_id" and "'name'" in e["message"]
    assert error({"input": [{"role": "tool", "content": "x"}]})["param"] == "input.0.role"
    assert error({"input": [{"type": "web_search_call"}]})["param"] == "input.0.type"
    assert error({"input": []})["param"] == "input"
    assert error({"input": "Hi", "tool_choice": {"type": "web_search"}})["param"] == "tool_choice.type"
    assert error({"input": "Hi", "background": True})["param"] == "background"
    assert (
        error({"input": "Hi", "text": {"format": {"type": "json_schema"}}})["param"] == "text.format.schema"
    )
    assert error({"input": "Hi", "temperature": -1})["type"] == "invalid_request_error"
    assert "input" in error({"model": "fake"})["message"]
    assert len(fake.requests) == 1  # only the temperature reached the model (its settings refused it)
    fake.refuse(APIError(503, "busy", code="server_overloaded", headers={"Retry-After": "1"}))
    r = client.post(URL, json={"input": "Hi"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1"


def test_a_stream_that_fails_ends_with_error_and_failed(client, fake):
    fake.queue(*answer("Hel")[:1], APIError(503, "the server lost an rpc-server", code="rpc_server_lost"))
    ev = events(client.post(URL, json={"input": "Hi", "stream": True}))
    assert [e["type"] for e in ev[-2:]] == ["error", "response.failed"]
    assert ev[-2]["code"] == "rpc_server_lost" and ev[-1]["response"]["error"]["code"] == "server_error"
    assert fake.streams[-1].cancelled
