"""Codex CLI (npm @openai/codex, `make npm-clients`) against a real `localspec serve`, configured as its
docs say for a custom provider on the Responses wire API: SmolLM2 as the target (and as its own draft
model, drafting 4 from the first round) with a 16k context, Codex's own prompt (its instructions and
tools, a built-in web_search among them) with its goal and sub-agent tools off (SmolLM2 loops on
create_goal otherwise; the tool output with no call_id that it brings back is tested in
tests/unit/test_openai_responses.py). A turn exits 0 and prints an answer; the next turn (`codex exec
resume`, which sends the whole conversation again) evaluates only its new prompt tokens, in the
target and in the draft."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ..helpers import ROOT, Server

CODEX = ROOT / ".npm-clients" / "node_modules" / ".bin" / "codex"
TARGET = "localspec:prompt_tokens_evaluated_total{role=target}"
DRAFT = "localspec:prompt_tokens_evaluated_total{role=draft}"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def codex() -> Path:
    if not CODEX.exists():
        if os.environ.get("CI"):
            pytest.fail("Codex CLI is not installed: `make npm-clients` installs it")
        pytest.skip("Codex CLI is not installed (make npm-clients)")
    return CODEX


@pytest.fixture(scope="module")
def server(smollm2_path):
    # Codex sends no max_output_tokens and takes a cut answer (response.incomplete) for an error: the
    # server's --max-tokens (256) must leave room for a short one
    srv = Server(smollm2_path, "--n-ctx", "16384", "--parallel", "1", "--temperature", "0", start_timeout=300)
    yield srv
    srv.stop()


def config(server: Server) -> str:
    return f"""model = "{server.health()["model"]}"
model_provider = "localspec"
model_context_window = 16384

# Codex's goal and sub-agent tools off: SmolLM2 at Codex's prompt calls create_goal again and again
# (each refused: the thread has an unfinished goal) and the turn never ends
[features]
goals = false
multi_agent = false

[model_providers.localspec]
name = "localspec"
base_url = "{server.url}/v1"
wire_api = "responses"
# a loaded machine's 10k-token prefill may pass Codex's 5-minute wait for the next event; a failure
# shows at once, not after five retries
stream_idle_timeout_ms = 1800000
stream_max_retries = 0
request_max_retries = 0
"""


def run(codex: Path, home: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env |= {"HOME": str(home), "CODEX_HOME": str(home / ".codex"), "NO_COLOR": "1"}
    t0 = time.monotonic()
    out = subprocess.run(
        [str(codex), "exec", "--skip-git-repo-check", "--color", "never", *args],
        cwd=home / "work", env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    return out, time.monotonic() - t0


def evaluated(server: Server) -> tuple[float, float]:
    m = server.metrics()
    return m[TARGET], m[DRAFT]


def test_codex_answers_and_its_second_turn_evaluates_only_the_new_tokens(codex, server, tmp_path):
    (tmp_path / ".codex").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text(config(server))
    before = evaluated(server)
    first, first_s = run(codex, tmp_path, "Reply with one word: hello.")
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.strip(), first.stderr[-3000:]  # the answer, on stdout
    mid = evaluated(server)
    target_1, draft_1 = mid[0] - before[0], mid[1] - before[1]
    # Codex's instructions and tools (~10k tokens), in both models: the draft drafts from the first round
    assert target_1 > 5000 and draft_1 > 5000, (target_1, draft_1)

    session = re.search(r"session id: (\S+)", first.stderr).group(1)
    second, second_s = run(codex, tmp_path, "resume", session, "Reply with one word: goodbye.")
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.strip(), second.stderr[-3000:]
    after = evaluated(server)
    target_2, draft_2 = after[0] - mid[0], after[1] - mid[1]
    # the new user turn, the first answer as the template writes it back, their markup: in the target
    # and in the draft, whose cache the first turn left as warm as the target's
    assert 0 < target_2 < 300 and draft_2 < 300, (target_1, draft_1, target_2, draft_2)
    # a second prefill of ~10k tokens by either model would cost this turn about what the first cost
    assert second_s < 0.5 * first_s, (first_s, second_s)
