"""JSON numbers are bounded as llama.cpp's JSON-schema grammars bound them (constrain/numbers.py, issue
#45): 16 integral digits in a schema's numbers and integers, in the values a schema leaves open, in
JSON mode and in every tool-call family's arguments; a bound the schema sets itself stands. Checked
with llguidance over a vocabulary of single characters, so every spelling is possible."""

from __future__ import annotations

import json

import pytest

from localspec.chat import families
from localspec.chat.tool_grammar import constraint
from localspec.constrain import Constraint, build_vocabulary, compile_constraint
from localspec.constrain.numbers import bounded

from ..toy_json import ToyVocab

CHARS = ToyVocab(["<eos>"] + [chr(c) for c in range(32, 127)] + ["\n"])
VOCAB = build_vocabulary(CHARS)
DIGITS16, DIGITS17 = "1234567890123456", "12345678901234567"


def allows(kind: str, text: str, doc: str) -> bool:
    """Whether the grammar takes `doc` whole and then ends."""
    m = compile_constraint(Constraint(kind=kind, text=text, strict=False), VOCAB).matcher()
    toks = CHARS.tokenize(doc)
    return m.valid_prefix([*toks, 0]) == len(toks) + 1


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number"},
        {"type": "integer"},
        {"type": ["integer", "null"]},
        {"anyOf": [{"type": "number"}, {"type": "string"}]},
        {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"},
        {},  # any value
    ],
)
def test_a_number_has_at_most_16_integral_digits(schema):
    text = json.dumps(schema)
    assert allows("json_schema", text, DIGITS16) and allows("json_schema", text, "-" + DIGITS16)
    assert not allows("json_schema", text, DIGITS17)


def test_a_fraction_is_bounded_and_a_schemas_own_bounds_stand():
    number = json.dumps({"type": "number"})
    assert allows("json_schema", number, "0.5") and allows("json_schema", number, "3.1415926535")
    assert not allows("json_schema", number, "3.14159265358979")
    big = json.dumps({"type": "integer", "minimum": 10**17})  # the schema's own: no cap of ours
    assert allows("json_schema", big, "123456789012345678")
    small = json.dumps({"type": "number", "maximum": 3, "multipleOf": 0.25})
    assert allows("json_schema", small, "-" + DIGITS16) and not allows("json_schema", small, "2.1")


@pytest.mark.parametrize(
    "kind,text",
    [
        ("json_object", ""),
        ("json_schema", json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})),
        ("json_schema", json.dumps({"type": "array"})),
    ],
)
def test_values_a_schema_leaves_open_are_bounded_too(kind, text):
    doc = '{"a":"x","b":[1.5,{"c":%s}]}' if kind != "json_schema" or "array" not in text else '[1.5,{"c":%s}]'
    assert allows(kind, text, doc % DIGITS16)
    assert not allows(kind, text, doc % DIGITS17)


TOOL = {
    "type": "function",
    "function": {
        "name": "population",
        "parameters": {
            "type": "object",
            "properties": {"country": {"type": "string"}, "population_millions": {"type": "number"}},
            "required": ["country", "population_millions"],
        },
    },
}
CALLS = {
    "generic": '{"tool_call":{"name":"population","arguments":{"country":"X","population_millions":%s}}}',
    "hermes": '<tool_call>\n{"name":"population","arguments":{"country":"X","population_millions":%s}}\n</tool_call>',
    "mistral": '[TOOL_CALLS][{"name":"population","arguments":{"country":"X","population_millions":%s}}]',
    "llama3": '{"name":"population","parameters":{"country":"X","population_millions":%s}}',
}


@pytest.mark.parametrize("family", sorted(CALLS))
def test_a_tool_calls_numbers_are_bounded_in_every_family(family):
    c = constraint(families.FAMILIES[family], [TOOL], "required", parallel=False)
    kind, text = ("json_schema", c["json_schema"]) if "json_schema" in c else ("lark", c["grammar"])
    assert allows(kind, text, CALLS[family] % "67.4")
    assert not allows(kind, text, CALLS[family] % ("1" + "0" * 16))


def test_bounded_leaves_what_is_not_a_number_alone_and_is_idempotent():
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "maxLength": 3}},
        "additionalProperties": False,
    }
    out = bounded(schema)
    assert out["properties"] == schema["properties"] and out["additionalProperties"] is False
    assert bounded(out) == out and bounded(False) is False
