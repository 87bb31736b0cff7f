"""The dialect-free parts of a chat request's plan: tool choice, template variables, and the
messages and tools as chat templates read them."""

from __future__ import annotations

import pytest

from localspec.chat import families, tool_prompt
from localspec.serving import APIError, Message, Request, Tool, ToolCall
from localspec.serving.plan import template_message, template_tool, template_vars, tool_choice
from localspec.serving.request import joined

TOOLS = (Tool("get", parameters={"type": "object"}),)


def test_tool_choice():
    assert tool_choice(Request(tools=TOOLS)) is None
    assert tool_choice(Request(tools=TOOLS, tool_choice="none")) == "none"
    assert tool_choice(Request(tools=TOOLS, tool_choice="required", forced_tool="get")) == "get"
    with pytest.raises(APIError, match="not among the tools"):
        tool_choice(Request(tools=TOOLS, tool_choice="required", forced_tool="put"))
    with pytest.raises(APIError, match="needs tools"):
        tool_choice(Request(tool_choice="required"))


def test_reasoning_on_or_off_is_the_templates_enable_thinking():
    assert template_vars(Request(reasoning=False)) == {"enable_thinking": False}
    assert template_vars(Request(reasoning=True, template_vars={"enable_thinking": False})) == {
        "enable_thinking": False  # the client's own variable wins
    }
    assert template_vars(Request()) == {}
    with pytest.raises(APIError) as e:
        template_vars(Request(template_vars={"messages": []}))
    assert e.value.param == "chat_template_kwargs"


def test_messages_and_tools_as_templates_read_them():
    call = Message("assistant", tool_calls=(ToolCall("c1", "get", '{"a": 1}'),), reasoning="hm")
    assert template_message(call) == {
        "role": "assistant", "content": "", "reasoning_content": "hm",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}],
    }  # fmt: skip
    assert template_message(Message("tool", "sunny", tool_call_id="c1", name="get")) == {
        "role": "tool", "content": "sunny", "tool_call_id": "c1", "name": "get",
    }  # fmt: skip
    assert template_tool(TOOLS[0]) == {
        "type": "function",
        "function": {"name": "get", "parameters": {"type": "object"}},
    }


def test_a_template_without_tool_results_reads_them_as_a_user_message():
    chatml = (
        "{% for m in messages %}{% if m.role != 'tool' %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "<|im_end|>\n{% endif %}{% endfor %}"
    )
    answered = template_message(Message("tool", "sunny", tool_call_id="c1"))
    unasked = template_message(Message("tool", "ship it", name="agent.goal_objective"))  # no call asked
    msgs, _ = tool_prompt.prepare(chatml, [answered, unasked], None, families.detect(chatml))
    assert msgs == [{"role": "user", "content": "\n".join([
        '{"tool_response": {"tool_call_id": "c1", "content": "sunny"}}',
        '{"tool_response": {"name": "agent.goal_objective", "content": "ship it"}}'])}]  # fmt: skip


def test_a_messages_text_parts_are_lines_and_its_images_stay_in_place():
    # llama.cpp's and vLLM's join: a newline between text parts, none beside an image
    assert joined(["</skills>", "<permissions>"]) == ("</skills>\n<permissions>", ())
    text, images = joined([b"A", "Look:", b"B", "this", "and that", ""])
    assert text == "Look:this\nand that\n"
    assert [(i.at, i.data) for i in images] == [(0, b"A"), (5, b"B")]
    assert joined(["", "a"]) == ("a", ())
    msg = template_message(Message("user", text, images), marker="<img>")
    assert msg["content"] == "<img>Look:<img>this\nand that\n"
