"""Is a Codex failure the model's or ours? A run's turns replayed on llama-server's /completion,
greedy, target only: each turn's request rebuilt from Codex's session log (its items) and a captured
request body of the same Codex version and config (its instructions, the first input item, which
the log does not keep as sent; its tools), rendered the
way localspec renders it (`--render ours`) or the way llama-server does (`--render peer`:
tools/agents/peer_prompt.py, no namespaces), and what llama-server generates printed beside what
the model did in the run. The same text from the same prompt: the answer is the model's.

    research/codex_replay.py ROLLOUT.jsonl BODY.json --url http://127.0.0.1:8080 [--render peer]

ROLLOUT: $CODEX_HOME/sessions/.../rollout-*.jsonl of a run (`python -m tools.agents` keeps a failed
run's folder); BODY: any request that Codex version sent (its `tools`)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import httpx

from localspec.chat import template as chat
from localspec.config.settings import Settings
from localspec.llama.model import Model
from localspec.server.openai import responses
from localspec.server.openai.responses_schemas import ResponsesRequest
from localspec.serving import plan
from tools.agents.peer_prompt import chat_body

TARGET = Path(__file__).parents[1] / "models" / "default" / "target-q4_k_m.gguf"
DROP = ("internal_chat_message_metadata_passthrough",)


class _Vocab:
    """What serving.plan needs of an engine to render and tokenize: the target's vocabulary."""

    vision = False

    def __init__(self, gguf: Path) -> None:
        self.text = Model(gguf, vocab_only=True)

    def render_chat(self, messages: list[dict], **extra: object) -> str:
        return chat.render_for(self.text, messages, **extra)

    def tokenize_chat(self, text: str, continuation: bool = False) -> list[int]:
        return chat.tokenize_rendered(self.text, text, continuation=continuation)


def turns(rollout: Path) -> tuple[list[dict], list[int]]:
    """(the items, where each of the model's answers starts)."""
    items = []
    for line in rollout.read_text().splitlines():
        r = json.loads(line)
        if r.get("type") == "response_item":
            items.append({k: v for k, v in r["payload"].items() if k not in DROP})
    starts = [i for i, it in enumerate(items) if it.get("role", "assistant") == "assistant" and i
              and (items[i - 1].get("type") == "function_call_output" or items[i - 1].get("role") == "user")]  # fmt: skip
    return items, starts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rollout", type=Path)
    ap.add_argument("body", type=Path)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--render", choices=("ours", "peer"), default="ours")
    ap.add_argument("--gguf", type=Path, default=TARGET)
    a = ap.parse_args()
    captured = json.loads(a.body.read_text())
    items, starts = turns(a.rollout)
    vocab = _Vocab(a.gguf) if a.render == "ours" else None
    with httpx.Client(base_url=a.url, timeout=900) as c:
        for n, at in enumerate(starts):
            body = captured | {"input": [captured["input"][0], *items[:at]]}
            if vocab is not None:
                prompt = plan.plan(
                    vocab, responses.parse(ResponsesRequest.model_validate(body)), Settings()
                ).prompt_text
            else:
                prompt = c.post("/apply-template", json=chat_body(body)).raise_for_status().json()["prompt"]
            t0 = time.monotonic()
            req = {"prompt": prompt, "temperature": 0, "n_predict": 160, "cache_prompt": True}
            out = c.post("/completion", json=req).raise_for_status().json()
            print(f"== turn {n}: {out['tokens_evaluated']} prompt tokens, {time.monotonic() - t0:.0f} s")
            print("llama-server:", json.dumps(out["content"])[:700])
            print("the run:     ", json.dumps(items[at])[:700])


if __name__ == "__main__":
    main()
