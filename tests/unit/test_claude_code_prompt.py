"""What the model reads of Claude Code's request is what llama-server (`--jinja`, the same GGUF)
renders for it. Claude Code 2.1.332's requests (tests/data/claude/*.json, captured by
`python -m tools.agents --capture`, long strings cut to 300 characters: its first turn; its second,
after an `Agent` call and its result; and reminder_turn, the first with a `Bash` call after it and a
user message holding the call's result, then a `<system-reminder>` text block, the shape Claude Code
sends a reminder in) go through the Messages
route and Qwen2.5-Coder's template; llama-server's render of the same body (*.llama-server.txt, from
`python -m tools.agents.peer_prompt`, its token count checked against llama-server's
/v1/messages/count_tokens) is the comparison. Two differences are ours on purpose: the
`x-anthropic-billing-header:` system block is left out (a client's version stamp, nothing to a
model), and so is a tool sent with `defer_loading` (Anthropic leaves it out of the prompt until a
search loads it: Claude Code's `DeferredToolPlaceholder`, "never call this tool")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from localspec.server.anthropic import messages
from localspec.server.anthropic.schemas import MessagesBody

from ..helpers import model_reads

DATA = Path(__file__).parents[1] / "data"
TEMPLATE = (DATA / "templates" / "Qwen-Qwen2.5-Coder-1.5B-Instruct.jinja").read_text()
BILLING = re.compile(r"^x-anthropic-billing-header:[^\n]*?;(?=You are)", re.M)


def rendered(body: dict) -> str:
    return model_reads(messages.parse(MessagesBody.model_validate(body)), TEMPLATE)


def peer_minus_ours_on_purpose(turn: str) -> str:
    """llama-server's render, less the billing header and the deferred tool's line."""
    peer = BILLING.sub("", (DATA / "claude" / f"{turn}.llama-server.txt").read_text(), count=1)
    lines = peer.split("\n")
    deferred = [ln for ln in lines if '"name": "DeferredToolPlaceholder"' in ln]
    assert len(deferred) == 1
    return "\n".join(ln for ln in lines if ln not in deferred)


@pytest.mark.parametrize("turn", ["first_turn", "second_turn", "reminder_turn"])
def test_claude_code_turn_renders_as_llama_server_renders_it(turn):
    body = json.loads((DATA / "claude" / f"{turn}.json").read_text())
    assert rendered(body) == peer_minus_ours_on_purpose(turn)
