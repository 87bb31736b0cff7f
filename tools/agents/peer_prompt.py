"""The prompt llama-server (`--jinja`) renders for a Responses body, for comparing with ours:
llama.cpp's Responses -> chat conversion (server-chat.cpp, `server_chat_convert_responses_to_chatcmpl`)
ported for the items an agent's turn holds, then llama-server's own POST /apply-template; the port is
checked against llama-server's count of the body's tokens (/v1/responses/input_tokens, its own
conversion). Needs a llama-server on the same GGUF:

    python -m tools.agents.peer_prompt BODY.json OUT.txt [--url http://127.0.0.1:8080]"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("body", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    a = ap.parse_args()
    body = json.loads(a.body.read_text())
    with httpx.Client(base_url=a.url, timeout=60) as c:
        prompt = c.post("/apply-template", json=chat_body(body)).raise_for_status().json()["prompt"]
        tokens = c.post("/tokenize", json={"content": prompt, "add_special": True, "parse_special": True})
        own = c.post("/v1/responses/input_tokens", json=body).raise_for_status().json()["input_tokens"]
    a.out.write_text(prompt)
    n = len(tokens.raise_for_status().json()["tokens"])
    print(f"{n} tokens; llama-server's own conversion: {own}" + ("" if n == own else " (the port differs)"))
    if n != own:
        sys.exit(1)


if __name__ == "__main__":
    main()
