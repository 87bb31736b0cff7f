"""Codex CLI (npm @openai/codex, `make npm-clients`) against a real `localspec serve`, configured as its
docs say for a custom provider on the Responses wire API: SmolLM2 as the target with a 16k context,
Codex's own ~10k-token prompt (its instructions and tools, a built-in web_search among them). A turn
exits 0 and prints an answer; the next turn (`codex exec resume`, which sends the whole
conversation again) evaluates only its new prompt tokens, in the target and in the draft."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ..helpers import ROOT, Server

CODEX = ROOT / ".npm-clients" / "node_modules" / ".bin" / "codex"
EVALUATED = "localspec:prompt_tokens_evaluated_total"


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
        cwd=home / "work", env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return out, time.monotonic() - t0


@pytest.mark.skip(
    reason="known failure (issue #46, open): on SmolLM2, Codex 0.171's request after the model's tool call "
    "gets a 400 \"'call_id' is required here\" at input.6.call_id; with the fake engine's tool calls "
    "(exec_command, a namespace tool, an unknown tool) Codex's follow-ups carry call_id and it exits 0"
)
def test_codex_answers_and_its_second_turn_evaluates_only_the_new_tokens(codex, server, tmp_path):
    (tmp_path / ".codex").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text(config(server))
    before = server.metrics()[EVALUATED]
    first, first_s = run(codex, tmp_path, "Reply with one word: hello.")
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.strip(), first.stderr[-3000:]  # the answer, on stdout
    evaluated_1 = server.metrics()[EVALUATED] - before
    assert evaluated_1 > 5000, evaluated_1  # Codex's instructions and tools: ~10k tokens

    session = re.search(r"session id: (\S+)", first.stderr).group(1)
    mid = server.metrics()[EVALUATED]
    second, second_s = run(codex, tmp_path, "resume", session, "Reply with one word: goodbye.")
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.strip(), second.stderr[-3000:]
    evaluated_2 = server.metrics()[EVALUATED] - mid
    # the target: the new user turn, the first answer as the template writes it back, their markup
    assert 0 < evaluated_2 < 300, (evaluated_1, evaluated_2)
    # the draft has no counter of its own: a second 10k-token prefill would cost it what the target's
    # cost the first turn, half of that turn's time
    assert second_s < 0.5 * first_s, (first_s, second_s)
