"""The Hermes family's tool-call grammar on Qwen2.5-Coder's own vocabulary, where `<tool_call>` and
`</tool_call>` are single special tokens (a grammar's text cannot match them; the grammar names them
by id). With `tool_choice: auto` the grammar is lazy: free text stays free, and it arms only where a
call starts - the tag, a ```json fence whose object names a declared tool, or a bare object naming
one at the answer's start - so other JSON, fenced or not, is never forced into a call."""

from __future__ import annotations

import pytest

from localspec.chat import families
from localspec.chat.tool_grammar import constraint
from localspec.constrain import Constraint, compile_constraint, vocabulary_for
from localspec.serving.plan import special_markers


def _tool(name: str, arg: str) -> dict:
    params = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    return {"type": "function", "function": {"name": name, "parameters": params}}


TOOLS = [_tool("get_weather", "city"), _tool("get_time", "zone")]
FENCE = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'
BARE = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
TAGGED = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
FREE = [  # answers the auto grammar leaves alone
    "The weather in Paris is mild. Use ``` for code blocks and <b>tags</b> freely.",
    'A record:\n```json\n{"name": "Ada", "born": 1815}\n```\nas asked.',
    '```json\n{"city": "Paris"}\n```',
    '{"name": "Ada"}',
    'Write {"name": "get_weather", "arguments": {"town": 1}} to call it.',  # not at the start
    "Before.\n" + FENCE + "\nAfter, more ``` text.",
    BARE + "\nThen prose.",
]
BAD = [  # calls whose arguments break the tool's schema: refused once the call has started
    FENCE.replace('"city"', '"town"'),
    FENCE.replace('"get_weather"', '"get_time"'),  # get_time takes a zone
    BARE.replace('"Paris"', "3"),
    "Sure.\n" + TAGGED.replace('"city"', '"town"'),
]


@pytest.fixture(scope="module")
def qwen(qwen_target_path):
    from localspec.llama import Model

    with Model(qwen_target_path, vocab_only=True) as m:
        yield m


@pytest.fixture(scope="module")
def specials(qwen):
    return special_markers(qwen, families.HERMES)


def _grammar(qwen, specials, choice):  # noqa: ANN001, ANN202
    text = constraint(families.HERMES, TOOLS, choice, parallel=True, specials=specials)["grammar"]
    return compile_constraint(Constraint(kind="lark", text=text), vocabulary_for(qwen, qwen.n_vocab))


def _accepts(g, qwen, text: str) -> bool:  # noqa: ANN001
    toks = qwen.tokenize(text, add_special=False)
    m = g.matcher()
    if m.valid_prefix(toks) < len(toks):
        return False
    m.consume(toks)
    return m.accepting


def test_qwens_tags_are_special_tokens_named_by_id(qwen, specials):
    assert specials == {
        "<tool_call>": qwen.tokenize("<tool_call>", add_special=False)[0],
        "</tool_call>": qwen.tokenize("</tool_call>", add_special=False)[0],
    }
    assert len(set(specials.values())) == 2


def test_auto_accepts_each_form_and_leaves_other_text_free(qwen, specials):
    g = _grammar(qwen, specials, None)
    for text in [FENCE, BARE, TAGGED, "Let me check.\n" + TAGGED, *FREE]:
        assert _accepts(g, qwen, text), text


def test_auto_refuses_bad_arguments_once_a_call_starts(qwen, specials):
    g = _grammar(qwen, specials, None)
    for text in BAD:
        toks = qwen.tokenize(text, add_special=False)
        assert g.matcher().valid_prefix(toks) < len(toks), text


@pytest.mark.parametrize("choice", ["required", "get_weather"])
def test_a_forced_call_is_written_in_the_tags(qwen, specials, choice):
    g = _grammar(qwen, specials, choice)
    assert _accepts(g, qwen, TAGGED)
    for text in [FENCE, BARE, "Prose.", "\n\n" + TAGGED]:  # no blanks first: a model could loop in them
        assert not _accepts(g, qwen, text), text
