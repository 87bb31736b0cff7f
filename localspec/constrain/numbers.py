"""JSON numbers bounded as llama.cpp's JSON-schema grammars bound them, so a model cannot write digits
until max_tokens (a small model once answered `"population_millions": 1000000000000...` to a tool
call's schema). llama.cpp's `json-schema-to-grammar` allows an integral part of at most 16 digits
(`[1-9] [0-9]{0,15}`), a fraction of at most 16 and an exponent of at most 16; llguidance bounds
nothing, and takes only JSON schema's own keywords, so every number a schema leaves open gets them:

- an integer: -10^16 <= n <= 10^16: 16 digits, as llama.cpp's (and 10^16 itself: llguidance reads
  a bound as a double, and 10^16 - 1 is not one);
- a number: -10^16 < x < 10^16 (16 integral digits) and a multiple of 1e-10 (10 fraction digits:
  the finest multipleOf llguidance takes); written without an exponent (llguidance writes none for a
  bounded number).

A bound the schema sets itself stands. Where a schema allows any value (`{}`, `true`, an object's
additional properties or an array's items left open, JSON mode's any object) it gets a recursive
"any JSON value" whose numbers are bounded the same way (`$defs`, under ANY).
"""

from __future__ import annotations

import copy
from typing import Any

from localspec.constrain.depth import depth_error
from localspec.constrain.errors import ConstraintError

INT_LIMIT = 10**16
NUMBER_LIMIT = 1e16
FRACTION_STEP = 1e-10
ANY = "localspec_any_json"
_REF = {"$ref": f"#/$defs/{ANY}"}
_NUMBER = {"type": "number", "exclusiveMinimum": -NUMBER_LIMIT, "exclusiveMaximum": NUMBER_LIMIT,
           "multipleOf": FRACTION_STEP}  # fmt: skip
_ANY_VALUE = {
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "string"},
        _NUMBER,
        {"type": "array", "items": _REF},
        {"type": "object", "additionalProperties": _REF},
    ]
}
_ANNOTATIONS = {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                "writeOnly"}  # fmt: skip
_ONE = ("additionalProperties", "items")  # keywords holding one subschema (items: or a list)
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions")


def bounded(schema: Any) -> Any:
    """A copy of a JSON schema (parsed) whose numbers are bounded as above; nothing else changes."""
    if schema is False:
        return schema
    too_deep = depth_error(schema)
    if too_deep:
        raise ConstraintError(too_deep)
    out = _schema(copy.deepcopy(schema))
    if isinstance(out, dict):
        out.setdefault("$defs", {})[ANY] = copy.deepcopy(_ANY_VALUE)
    return out


def _schema(node: Any) -> Any:
    if node is True or (isinstance(node, dict) and set(node) <= _ANNOTATIONS):
        return {**(node if isinstance(node, dict) else {}), **_REF}
    if not isinstance(node, dict):
        return node
    types = node.get("type")
    types = {types} if isinstance(types, str) else set(types or ())
    if "number" in types:
        _bound(node, -NUMBER_LIMIT, NUMBER_LIMIT, exclusive=True)
        node.setdefault("multipleOf", FRACTION_STEP)
    elif "integer" in types:
        _bound(node, -INT_LIMIT, INT_LIMIT, exclusive=False)
    if "object" in types and "additionalProperties" not in node:
        node["additionalProperties"] = True  # open: any value, made bounded below
    if "array" in types and "items" not in node:
        node["items"] = True
    for key in _ONE:
        if key in node and node[key] is not False:
            sub = node[key]
            node[key] = [_schema(s) for s in sub] if isinstance(sub, list) else _schema(sub)
    for key in _MANY:
        if isinstance(node.get(key), list):
            node[key] = [_schema(s) for s in node[key]]
    for key in _NAMED:
        if isinstance(node.get(key), dict):
            node[key] = {name: _schema(s) for name, s in node[key].items()}
    return node


def _bound(node: dict, lo: float, hi: float, *, exclusive: bool) -> None:
    """Add the bounds the schema does not set, where they leave it satisfiable."""
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    keys = ("exclusiveMinimum", "exclusiveMaximum") if exclusive else ("minimum", "maximum")
    if low is None and (high is None or _num(high) > lo):
        node[keys[0]] = lo
    if high is None and (low is None or _num(low) < hi):
        node[keys[1]] = hi


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0
