"""The constraint a tool call needs, in its family's syntax: a JSON schema for the generic format
(the whole answer is one JSON object), a Lark grammar with the tools' schemas inlined (`%json`) for
the others. `required` or a named function: the answer is the call(s). `auto`: any text, and once
the family's opening marker appears the call after it must be valid - llguidance's lazy lexemes
(docs/syntax.md, "Tool calling") arm the grammar at the marker, as llama.cpp's lazy grammars do (a
marker that is a special token ends the free text by itself; Hermes also arms at the untagged calls
Qwen2.5-Coder writes, `untagged`).
JSON numbers in a call are bounded as llama.cpp bounds them (constrain/numbers.py: here for the
`%json` bodies, in compile for the generic format's schema, as for every JSON schema)."""

from __future__ import annotations

import json
from typing import Any

from localspec.chat.families import Family
from localspec.constrain.numbers import bounded


def _call_schema(fn: dict, args_key: str = "arguments") -> dict:
    params = dict(fn.get("parameters") or {"type": "object"})
    if params.get("type") == "object" and "properties" in params:
        # the arguments the tool declares and no others (OpenAI's strict mode does the same): a small
        # model otherwise wanders on through keys of its own and never closes the object
        params.setdefault("additionalProperties", False)
    return {
        "type": "object",
        "properties": {"name": {"const": fn["name"]}, args_key: params},
        "required": ["name", args_key],
        "additionalProperties": False,
    }


def _one_of(schemas: list[dict]) -> dict:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def constraint(
    family: Family,
    tools: list[dict],
    choice: str | None,
    *,
    parallel: bool,
    specials: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Settings overrides (json_schema or grammar) for a request with tools. choice: None (auto),
    "required", or the one function's name. `specials`: markers that are single control tokens."""
    fns = [
        t["function"] for t in tools if not choice or choice == "required" or t["function"]["name"] == choice
    ]
    if family.name == "generic":
        call = _one_of([_call_schema(f) for f in fns])
        forms = [
            {
                "type": "object",
                "properties": {"tool_call": call},
                "required": ["tool_call"],
                "additionalProperties": False,
            }
        ]
        if parallel:
            calls = {"type": "array", "items": call, "minItems": 1}
            forms.append(
                {
                    "type": "object",
                    "properties": {"tool_calls": calls},
                    "required": ["tool_calls"],
                    "additionalProperties": False,
                }
            )
        if choice is None:
            forms.append(
                {
                    "type": "object",
                    "properties": {"response": {"type": "string"}},
                    "required": ["response"],
                    "additionalProperties": False,
                }
            )
        return {"json_schema": json.dumps(_one_of(forms)), "json_strict": False}
    return {"grammar": lark(family, fns, choice, parallel=parallel, specials=specials or {})}


def _lit(marker: str, specials: dict[str, int]) -> str:
    """A marker in Lark: its control token when it is one (text would not match it), else its text."""
    return f"<[{specials[marker]}]>" if marker in specials else json.dumps(marker)


def lark(
    family: Family, fns: list[dict], choice: str | None, *, parallel: bool, specials: dict[str, int]
) -> str:
    key = "parameters" if family.name == "llama3" else "arguments"
    body = "%json " + json.dumps(bounded(_one_of([_call_schema(f, key) for f in fns])))
    if family.name == "hermes":
        nl = '"\\n"'
        opener = f"{_lit('<tool_call>', specials)} {nl}"
        call, sep = f"{body} {nl} {_lit('</tool_call>', specials)}", "WS"
    elif family.name == "mistral":  # one array holds every call
        items = f' ("," " "? {body})*' if parallel else ""
        opener, call, sep = _lit("[TOOL_CALLS]", specials), f'"[" {body}{items} "]"', None
    else:  # llama3: the call is the answer, JSON first
        opener, call, sep = '""', body, '";" " "?'
    more = f" ({sep} {opener} {call})*" if parallel and sep else ""
    lines = ["WS: /[ \\t\\r\\n]*/", "TEXT: /(?s:.*)/"]
    if choice is not None or family.name == "llama3":
        if family.name == "llama3" and choice is None:  # auto: a JSON call first, or text that is none
            lines += ["start: calls | PROSE", "PROSE: /[^{\\s](?s:.*)/"]
            lead = "WS "
        else:  # a forced call opens the answer: leading whitespace would let a model that does not
            # want the marker (Qwen2.5-Coder and its special <tool_call>) write blanks to max_tokens
            lines.append("start: calls")
            lead = ""
        lines.append(f"calls: {lead}{opener} {call}{more} WS")
    elif opener.startswith("<["):  # auto, the marker a control token: TEXT cannot hold it, so it ends there
        lines += ["start: call* TEXT", f"call: TEXT {opener} {call}"]
    else:  # auto: any text, and a valid call wherever the opening marker is written
        lines += ["start: call* TEXT", f"head[lazy]: TEXT {opener}", f"call: head {call}"]
    if family.name == "hermes" and choice is None:
        lines = untagged(lines, fns)
    return "\n".join(lines)


# Qwen2.5-Coder's calls without the tags: a ```json fence, or a bare object that opens the answer. The
# grammar arms where such an object names a declared tool (llama.cpp's Hermes trigger does the same),
# so other JSON - in a fence or not - stays free; from there on the call's arguments must be valid.
_S = "[ \\t\\r\\n]*"
UNTAGGED = [
    f'FENCE: /```(json)?[ \\t]*\\n{_S}\\{{{_S}"name"{_S}:{_S}/',
    f'BARE: /{_S}\\{{{_S}"name"{_S}:{_S}/',
]


def untagged(lines: list[str], fns: list[dict]) -> list[str]:
    """The auto grammar's lines with the untagged forms added."""
    fenced, bare = [], []
    for i, f in enumerate(fns):
        name = json.dumps(json.dumps(f["name"]))  # the name as JSON text, as a Lark string
        args = json.dumps(bounded(_call_schema(f)["properties"]["arguments"]))
        fenced.append(f'fhead{i} rest{i} WS "```"')
        bare.append(f"bhead{i} rest{i}")
        lines += [
            f"fhead{i}[lazy]: TEXT FENCE {name}",
            f"bhead{i}[lazy]: BARE {name}",
            f'rest{i}: WS "," WS "\\"arguments\\"" WS ":" WS %json {args} WS "}}"',
        ]
    start = lines.index("start: call* TEXT")
    lines[start] = "start: bare? (call | fenced)* TEXT"
    return lines + UNTAGGED + [f"fenced: {' | '.join(fenced)}", f"bare: {' | '.join(bare)}"]
