"""What the model reads of Codex's request is what llama-server (`--jinja`, the same GGUF) renders
for it. Codex 0.171's first turn (tests/data/codex/first_turn.json, trimmed: two developer messages,
one of them two text parts; function tools with `strict`; a namespace; web_search) and its second
(second_turn.json: its preamble, its exec_command call and the command's output) go through the
Responses route and Qwen2.5-Coder's template; llama-server's render of the same body
(*.llama-server.txt, from `python -m tools.agents.peer_prompt`) is the comparison. The one
difference is ours on purpose: the namespace's members are offered (llama-server drops them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec.server.openai import responses
from localspec.server.openai.responses_schemas import ResponsesRequest

from ..helpers import model_reads

DATA = Path(__file__).parents[1] / "data"
TEMPLATE = (DATA / "templates" / "Qwen-Qwen2.5-Coder-1.5B-Instruct.jinja").read_text()


def rendered(body: dict) -> str:
    return model_reads(responses.parse(ResponsesRequest.model_validate(body)), TEMPLATE)


@pytest.mark.parametrize("turn", ["first_turn", "second_turn"])
def test_codex_turn_renders_as_llama_server_renders_it(turn):
    body = json.loads((DATA / "codex" / f"{turn}.json").read_text())
    ours = rendered(body).split("\n")
    namespaced = [ln for ln in ours if '"name": "multi_agent_v1.close_agent"' in ln]
    assert len(namespaced) == 1
    peer = (DATA / "codex" / f"{turn}.llama-server.txt").read_text()
    assert "\n".join(ln for ln in ours if ln not in namespaced) == peer
