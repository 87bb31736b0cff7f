"""Tool calls as Qwen2.5-Coder writes them, through the Hermes family's parser: in `<tool_call>` tags,
in a ```json fence, or as a bare object that is the whole answer. The untagged forms are calls only
when they name a declared tool and have arguments; any other JSON, fenced or not, stays text. Every
answer parsed in arbitrary pieces (as tokens, or a speculative round's several tokens, arrive)
assembles to the message the whole answer gives."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.chat import families
from localspec.chat.deltas import assemble
from localspec.chat.output import answer_parser, parse_answer

NAMES = ("get_weather", "get_time")
PARIS = {"city": "Paris"}
# what the real Qwen2.5-Coder-1.5B writes for "What is the weather in Paris?" with one tool declared
CODER_FENCE = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'

# (the model's answer, content, [(name, arguments)])
CASES = [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "",
     [("get_weather", PARIS)]),
    (CODER_FENCE, "", [("get_weather", PARIS)]),
    ('```\n{"name": "get_time", "arguments": {"zone": "CET"}}\n```', "", [("get_time", {"zone": "CET"})]),
    ('I will look it up.\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\nOne moment.',
     "I will look it up.\nOne moment.", [("get_weather", PARIS)]),
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}', "", [("get_weather", PARIS)]),
    ('\n  {"name": "get_weather", "arguments": {"city": "Paris"}}\n', "", [("get_weather", PARIS)]),
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}\n{"name": "get_time", "arguments": {"zone": "CET"}}',
     "", [("get_weather", PARIS), ("get_time", {"zone": "CET"})]),
    ('```json\n{"arguments": {"city": "Paris"}, "name": "get_weather"}\n```', "", [("get_weather", PARIS)]),
    ('```json\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n```', "",
     [("get_weather", PARIS)]),
    ('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n```json\n'
     '{"name": "get_time", "arguments": {}}\n```', "", [("get_weather", PARIS), ("get_time", {})]),
]  # fmt: skip

# JSON that is no call stays text as written
TEXT = [
    'Here is the record:\n```json\n{"name": "Ada", "born": 1815}\n```',  # a name no tool has
    '```json\n{"name": "get_weather"}\n```',  # a tool's name, but no arguments
    '```json\n{"city": "Paris", "days": [1, 2]}\n```\nThat is the input.',  # no name
    '```json\n[{"name": "get_weather", "arguments": {}}]\n```',  # not an object
    '```python\ndef f():\n    return {"name": "get_weather", "arguments": {}}\n```',
    'Call it like this: {"name": "get_weather", "arguments": {"city": "Paris"}}',  # not the answer's start
    '{"answer": 42}',
    "Use ``` to open a block, and `x` for code; <tool_call> is the tag.",
    "```",
    "```json\n",
    '```json\n{"name": "get_weather", "arg',  # cut short before the arguments: text
    "  \n  Plain, after blank lines.",
]


def _parse(text: str, names=NAMES):  # noqa: ANN001, ANN202
    return parse_answer(answer_parser(families.HERMES, tools=True, tool_names=names), text)


def _calls(msg) -> list:  # noqa: ANN001
    return [(c.name, json.loads(c.arguments)) for c in msg.tool_calls]


def _streamed(text: str, cuts: list[int], names=NAMES):  # noqa: ANN001, ANN202
    p = answer_parser(families.HERMES, tools=True, tool_names=names)
    deltas, at = [], 0
    for cut in sorted(set(cuts)) + [len(text)]:
        deltas += p.feed(text[at:cut])
        at = max(at, cut)
    return deltas + p.finish()


def test_each_form_is_a_call():
    for text, content, calls in CASES:
        msg, _ = _parse(text)
        assert (msg.content, _calls(msg)) == (content, calls), text
        assert len({c.id for c in msg.tool_calls}) == len(calls)


def test_json_that_is_no_call_stays_text():
    for text in TEXT:
        msg, _ = _parse(text)
        assert (msg.content, msg.tool_calls) == (text, []), text


def test_without_declared_tools_untagged_json_is_text():
    msg, _ = _parse(CODER_FENCE, names=())
    assert (msg.content, msg.tool_calls) == (CODER_FENCE, [])


def test_a_fenced_call_cut_short_is_still_a_call():
    msg, _ = _parse('```json\n{"name": "get_weather", "arguments": {"city": "Pa')
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_weather", '{"city": "Pa')]


@settings(max_examples=150, deadline=None)
@given(i=st.integers(0, len(CASES) + len(TEXT) - 1), cuts=st.lists(st.integers(0, 160), max_size=40))
def test_any_pieces_give_the_whole_answers_message(i, cuts):
    text = CASES[i][0] if i < len(CASES) else TEXT[i - len(CASES)]
    whole, _ = _parse(text)
    deltas = _streamed(text, [c for c in cuts if c <= len(text)])
    got = assemble(deltas)
    assert got.content == whole.content
    assert [(c.name, c.arguments) for c in got.tool_calls] == [
        (c.name, c.arguments) for c in whole.tool_calls
    ]
    heads = [d for d in deltas if d.call is not None and d.name is not None]
    assert [d.call for d in heads] == list(range(len(whole.tool_calls)))  # index, id and name once


def test_a_fenced_calls_arguments_stream_before_it_closes():
    p = answer_parser(families.HERMES, tools=True, tool_names=NAMES)
    seen = [p.feed(ch) for ch in CODER_FENCE]
    steps = [i for i, ds in enumerate(seen) if any(d.arguments for d in ds)]
    named = next(i for i, ds in enumerate(seen) if any(d.name for d in ds))
    assert len(steps) > 10 and steps[-1] < CODER_FENCE.rindex("}")
    assert named < CODER_FENCE.index('"city"')  # the name goes out once the arguments begin
    assert not any(d.content for ds in seen for d in ds)  # the fence is not content


def test_a_bare_call_after_the_thinking_block_is_a_call():
    text = '<think>\nThe weather tool.\n</think>\n\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    p = answer_parser(families.HERMES, tools=True, reasoning_format="deepseek", tool_names=NAMES)
    msg, _ = parse_answer(p, text)
    assert msg.reasoning == "\nThe weather tool.\n" and msg.content == ""
    assert _calls(msg) == [("get_weather", PARIS)]
