"""A JSON schema nested hundreds of levels deep (22 KB) in any dialect's constraint or a tool's
parameters is a 400 in that dialect's shape naming the depth limit, found before anything recurses
into it (issue 60, #7: a 500 RecursionError from deepcopy, with a logged traceback)."""

from __future__ import annotations

import json

import pytest

from localspec.constrain import Constraint, ConstraintError, compile_constraint
from localspec.constrain.depth import MAX_DEPTH
from tests.toy_json import VOCAB

HI = [{"role": "user", "content": "Hi"}]


def deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


DEEP = deep(400)
TOOL = {"name": "f", "parameters": DEEP}
CASES = {  # path, body, the parameter the error names
    "ollama format": ("/api/chat", {"model": "fake", "messages": HI, "format": DEEP, "stream": False}, None),
    "responses text.format": (
        "/v1/responses",
        {
            "model": "fake",
            "input": "Hi",
            "text": {"format": {"type": "json_schema", "name": "x", "schema": DEEP}},
        },
        "text.format.schema",
    ),
    "chat response_format": (
        "/v1/chat/completions",
        {
            "model": "fake",
            "messages": HI,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": DEEP}},
        },
        "response_format.json_schema.schema",
    ),  # fmt: skip
    "completion json_schema": (
        "/v1/completions",
        {"model": "fake", "prompt": "Hi", "json_schema": DEEP},
        "json_schema",
    ),
    "chat tool": (
        "/v1/chat/completions",
        {"model": "fake", "messages": HI, "tools": [{"type": "function", "function": TOOL}]},
        "tools",
    ),
    "anthropic tool": (
        "/v1/messages",
        {"model": "fake", "max_tokens": 8, "messages": HI, "tools": [{"name": "f", "input_schema": DEEP}]},
        None,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_deep_schema_is_a_400_naming_the_limit(client, case):
    path, body, param = CASES[case]
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    text = json.dumps(r.json())
    assert f"more than {MAX_DEPTH} levels deep" in text, text
    if param is not None:
        assert r.json()["error"]["param"] == param


def test_the_compiler_refuses_a_deep_schema_text_with_the_limit():
    for levels in (400, 5000):  # 5000: deeper than json.loads itself can recurse
        text = json.dumps(deep(levels)) if levels < 900 else '{"items":' * levels + "{}" + "}" * levels
        with pytest.raises(ConstraintError, match=f"more than {MAX_DEPTH} levels deep"):
            compile_constraint(Constraint(kind="json_schema", text=text), VOCAB)


def test_a_schema_within_the_limit_compiles():
    compile_constraint(Constraint(kind="json_schema", text=json.dumps(deep(20))), VOCAB)
