"""The prompt llama-server (`--jinja`) renders for a Responses or Messages body, for comparing with
ours: llama.cpp's conversion to a chat body (server-chat.cpp, `server_chat_convert_responses_to_chatcmpl`,
`server_chat_convert_anthropic_to_oai`) ported for the items and blocks an agent's turn holds, then
llama-server's own POST /apply-template; the port is checked against llama-server's count of the
body's tokens (/v1/responses/input_tokens, /v1/messages/count_tokens: its own conversion). Needs a
llama-server on the same GGUF:

    python -m tools.agents.peer_prompt BODY.json OUT.txt [--url http://127.0.0.1:8080]"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import httpx


def _parts(content: str | list) -> list[dict]:
    items = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    return [{"type": "text", "text": p.get("text", "")} for p in items]


def _add(msgs: list[dict], it: dict) -> None:
    """One input item, as llama.cpp converts it (an assistant's items merged into one message)."""
    merge, kind = bool(msgs) and msgs[-1]["role"] == "assistant", it.get("type")
    if it.get("role") in ("user", "system", "developer"):
        msgs.append({"role": it["role"], "content": _parts(it.get("content") or [])})
    elif it.get("role") == "assistant" and kind == "message":
        if merge:
            msgs[-1]["content"] = (msgs[-1].get("content") or []) + _parts(it["content"])
        else:
            msgs.append({"role": "assistant", "content": _parts(it["content"])})
    elif kind == "function_call":
        call = {"id": it["call_id"], "type": "function",
                "function": {"name": it["name"], "arguments": it["arguments"]}}  # fmt: skip
        if merge:
            msgs[-1].setdefault("tool_calls", []).append(call)
        else:
            msgs.append({"role": "assistant", "tool_calls": [call]})
    elif kind == "function_call_output":
        msgs.append({"role": "tool", "tool_call_id": it["call_id"], "content": it["output"]})
    elif kind == "reasoning":
        text = it["content"][0]["text"]
        if merge:
            msgs[-1]["reasoning_content"] = text
        else:
            msgs.append({"role": "assistant", "content": [], "reasoning_content": text})
    else:
        sys.exit(f"llama-server refuses this item: {json.dumps(it)[:200]}")


def chat_body(body: dict) -> dict:
    msgs: list[dict] = []
    if "instructions" in body:
        msgs.append({"role": "system", "content": body["instructions"]})
    items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
    for it in items:
        _add(msgs, it)
    tools = []
    for t in body.get("tools", []):
        if t.get("type") == "function":  # llama-server skips every other kind (namespaces, web_search)
            tools.append(
                {
                    "type": "function",
                    "function": {"strict": True} | {k: v for k, v in t.items() if k != "type"},
                }
            )
    return {"messages": msgs, "tools": tools, "tool_choice": body.get("tool_choice", "auto"),
            "parallel_tool_calls": body.get("parallel_tool_calls", False)}  # fmt: skip


_CCH = re.compile(r"^(x-anthropic-billing-header:.*?cch=)[^;]{5};")


def _system_text(text: str) -> str:
    """Claude Code's billing header with its per-request stamp as llama.cpp rewrites it (fffff)."""
    return _CCH.sub(lambda m: m[1] + "fffff;", text, count=1)


def _anthropic_message(msgs: list[dict], m: dict) -> None:
    """One Messages message, as llama.cpp converts it: its text blocks (and thinking, tool_use) as one
    message, then its tool results, each a tool message; a result's text blocks joined with nothing."""
    content = m.get("content")
    if not isinstance(content, list):
        msgs.append(m)
        return
    parts, calls, results, reasoning = [], [], [], ""
    for b in content:
        kind = b.get("type")
        if kind == "text":
            parts.append(b)
        elif kind == "thinking":
            reasoning += b.get("thinking", "")
        elif kind == "tool_use":
            args = json.dumps(b.get("input", {}), ensure_ascii=False, separators=(",", ":"))
            calls.append(
                {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": args}}
            )
        elif kind == "tool_result":
            c = b.get("content", "")
            text = (
                c if isinstance(c, str) else "".join(x.get("text", "") for x in c if x.get("type") == "text")
            )
            results.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text})
        else:
            sys.exit(f"not ported: a {kind!r} block")
    if parts or calls or reasoning:
        out: dict = {"role": m["role"], "content": parts or ""}
        if calls:
            out["tool_calls"] = calls
        if reasoning:
            out["reasoning_content"] = reasoning
        msgs.append(out)
    msgs += results


def messages_chat_body(body: dict) -> dict:
    """A Messages body -> the chat body llama-server renders for it."""
    msgs: list[dict] = []
    system = body.get("system")
    if system is not None:
        if isinstance(system, str):
            text = _system_text(system)
        else:
            text = "".join(_system_text(b.get("text", "")) for b in system if b.get("type") == "text")
        msgs.append({"role": "system", "content": text})
    for m in body["messages"]:
        _anthropic_message(msgs, m)
    tools = [{"type": "function", "function": {"name": t.get("name", ""), "description": t.get("description", ""),
              "parameters": t.get("input_schema", {})}} for t in body.get("tools", [])]  # fmt: skip
    choice = {"auto": "auto", "any": "required", "tool": "required"}.get(
        (body.get("tool_choice") or {}).get("type")
    )
    return {"messages": msgs, "tools": tools} | ({"tool_choice": choice} if choice else {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("body", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    a = ap.parse_args()
    body = json.loads(a.body.read_text())
    anthropic = "messages" in body
    convert, count = (messages_chat_body, "/v1/messages/count_tokens") if anthropic else (
        chat_body, "/v1/responses/input_tokens")  # fmt: skip
    with httpx.Client(base_url=a.url, timeout=60) as c:
        prompt = c.post("/apply-template", json=convert(body)).raise_for_status().json()["prompt"]
        tokens = c.post("/tokenize", json={"content": prompt, "add_special": True, "parse_special": True})
        own = c.post(count, json=body).raise_for_status().json()["input_tokens"]
    a.out.write_text(prompt)
    n = len(tokens.raise_for_status().json()["tokens"])
    print(f"{n} tokens; llama-server's own conversion: {own}" + ("" if n == own else " (the port differs)"))
    if n != own:
        sys.exit(1)


if __name__ == "__main__":
    main()
