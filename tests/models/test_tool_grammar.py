"""The tool-call constraints of every family, compiled by llguidance for SmolLM2's vocabulary: a
well-formed call in the family's syntax is accepted token by token and ends the grammar, arguments
that break the tool's schema are refused, and `auto` lets prose through until the opening marker
(the grammar arms only there)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from localspec.chat import families
from localspec.chat.tool_grammar import constraint
from localspec.constrain import Constraint, compile_constraint, vocabulary_for

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALLS = {
    "hermes": '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>',
    "mistral": '[TOOL_CALLS][{"name":"get_weather","arguments":{"city":"Paris"}}]',
    "llama3": '{"name":"get_weather","parameters":{"city":"Paris"}}',
}


@pytest.fixture(scope="module")
def vocab(smollm2):
    return vocabulary_for(smollm2, smollm2.n_vocab)


def _grammar(family: str, choice, vocab):  # noqa: ANN001
    c = constraint(families.FAMILIES[family], [TOOL], choice, parallel=True)
    kind, text = ("json_schema", c["json_schema"]) if "json_schema" in c else ("lark", c["grammar"])
    return compile_constraint(Constraint(kind=kind, text=text, strict=False), vocab)


@pytest.mark.parametrize("family", sorted(CALLS))
@pytest.mark.parametrize("choice", [None, "required", "get_weather"])
def test_a_valid_call_is_accepted_and_a_bad_one_refused(smollm2, vocab, family, choice):
    g = _grammar(family, choice, vocab)
    text = CALLS[family]
    toks = smollm2.tokenize(text, add_special=False)
    m = g.matcher()
    assert m.valid_prefix(toks) == len(toks)
    m.consume(toks)
    assert m.accepting
    bad = smollm2.tokenize(text.replace('"Paris"', "3"), add_special=False)
    assert g.matcher().valid_prefix(bad) < len(bad)


def test_auto_lets_prose_through_until_the_marker(smollm2, vocab):
    g = _grammar("hermes", None, vocab)
    prose = smollm2.tokenize("I will look that up for you. ", add_special=False)
    m = g.matcher()
    m.consume(prose)
    assert m.accepting  # prose alone is a complete answer
    call = smollm2.tokenize(CALLS["hermes"].replace('"Paris"', "3"), add_special=False)
    assert m.valid_prefix(call) < len(call)  # after the marker, the call's schema holds


@pytest.mark.parametrize("choice", [None, "required"])
def test_generic_answers_validate_as_the_format(smollm2, vocab, choice):
    g = _grammar("generic", choice, vocab)
    schema = json.loads(constraint(families.GENERIC, [TOOL], choice, parallel=True)["json_schema"])
    call = '{"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}}'
    jsonschema.validate(json.loads(call), schema)
    assert g.matcher().valid_prefix(t := smollm2.tokenize(call, add_special=False)) == len(t)
    reply = '{"response":"Hello"}'
    ok = g.matcher().valid_prefix(t := smollm2.tokenize(reply, add_special=False)) == len(t)
    assert ok == (choice is None)  # a reply only when the call is not required
