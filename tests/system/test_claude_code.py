"""Claude Code (npm @anthropic-ai/claude-code, `make npm-clients`) against a real `localspec serve`, as
docs/apps.md says to point it (ANTHROPIC_BASE_URL, any key, no traffic elsewhere; tools/agents/clients.py).

Its real task on the real pair is in test_agents_real.py. Here SmolLM2 (cheap), with each prefill
round slowed past Claude Code's stream watchdog (its byte watchdog at its floor, 10 s; the event
watchdog's floor is 5 minutes): the answer comes in one request, none cut off and none retried.
SmolLM2 runs without the tools (`--tools ""`: their ~11k tokens would pass its 8k training context)."""

from __future__ import annotations

import pytest

from tools.agents.clients import Endpoint, run
from tools.agents.record import Watch

from ..helpers import Server, need_agent

IDLE_MS = 10_000  # the floor Claude Code puts under CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    need_agent("claude")


def test_a_prefill_slower_than_its_stream_watchdog_is_not_retried(smollm2_path, tmp_path):
    log = tmp_path / "acc.jsonl"
    # each prefill round of 32 tokens 0.4 s slower: Claude Code's ~1.9k-token prompt takes 24 s or more
    srv = Server(
        smollm2_path, "--n-ctx", "8192", "--parallel", "1", "--temperature", "0", "--lookup", "only",
        "--n-batch", "32", "--stream-keepalive", "1", "--log", str(log), start_timeout=300,
        env={"LOCALSPEC_TEST_PREFILL_DELAY": "0.4"},
    )  # fmt: skip
    try:
        ep = Endpoint(srv.url, srv.health()["model"], 8192, stream_idle_ms=IDLE_MS, small_model=True)
        watch = Watch(srv.url, log)
        out = run("claude", ep, tmp_path / "home", tmp_path / "work", "What is the capital of France?",
                  timeout=600)  # fmt: skip
        rec = watch.record()
    finally:
        srv.stop()
    assert out.returncode == 0 and out.stdout.strip(), out.stdout[-2000:] + out.stderr[-3000:]
    main = [i for i, n in enumerate(rec.prompts) if n > 1000]  # its system prompt is ~1.9k tokens
    assert len(main) == 1 and rec.cut == 0, rec  # one request, not cut off, not sent again
    assert rec.prefill[main[0]] > 2 * IDLE_MS / 1e3, rec  # the prefill did outlast the watchdog
