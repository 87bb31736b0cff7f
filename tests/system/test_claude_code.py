"""Claude Code (npm @anthropic-ai/claude-code, installed by `make npm-clients` into .npm-clients/) against a real
`localspec serve`, as docs/apps.md says to point it: ANTHROPIC_BASE_URL, an API key, no traffic to
anywhere else. SmolLM2 is the target (lookup drafts, no draft model) with a 16k context. Claude Code runs
with `--tools ""`: its own system prompt (~1.9k tokens) without the 12 tools' ~11k tokens of schemas,
which would put the prompt past SmolLM2's 8192-token training context, where its answers degenerate and
never end (Claude Code treats an answer cut at max_tokens or at the context as an error). `claude -p` completes a turn; the second (`--continue`) re-sends the whole conversation,
and only its new tokens are evaluated: the cached prefix serves the rest. With each prefill round slowed
past Claude Code's stream watchdog (its byte watchdog at its floor, 10 s; the event watchdog's floor is
5 minutes) the answer comes in one request, none cut off and none retried (issue 57)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tools.agents.clients import Endpoint, run
from tools.agents.record import Watch

from ..helpers import ROOT, Server, need_agent

CLAUDE = ROOT / ".npm-clients" / "node_modules" / ".bin" / "claude"
N_CTX = 16384
IDLE_MS = 10_000  # the floor Claude Code puts under CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(smollm2_path):
    if not CLAUDE.exists():
        pytest.skip(f"Claude Code is not installed at {CLAUDE}: `make npm-clients` installs it")
    # SmolLM2 alone, as docs/apps.md serves it (`--target`): lookup drafts, no draft model to prefill
    # the ~12k-token prompt a second time. Claude Code sends no sampling settings: the server's decide
    srv = Server(
        smollm2_path, "--n-ctx", str(N_CTX), "--parallel", "1", "--temperature", "0", "--lookup", "only"
    )
    yield srv
    srv.stop()


def claude(server: Server, home, *args: str) -> subprocess.CompletedProcess:
    keep = ("PATH", "LANG", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep} | {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "sk-local",  # any key: the server asks for none here
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, updates, error reports
        "DISABLE_AUTOUPDATER": "1",
        "API_TIMEOUT_MS": "1500000",  # a 12k-token prefill on two busy cores may pass its 10 min
        # an answer cut at this length is an error to `claude -p` (after retries): room for a 135M
        # model's answer, short of the ~3.5k tokens the context leaves
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "256",
    }
    # stdin closed: `claude -p` otherwise waits for more prompt on it
    return subprocess.run(
        [str(CLAUDE), "-p", *args, "--tools", ""], cwd=home, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip


def evaluated(server: Server) -> tuple[float, float]:
    m = server.metrics()
    return m["localspec:prompt_tokens_evaluated_total{role=target}"], m["llamacpp:prompt_seconds_total"]


def test_two_turns_and_the_second_evaluates_only_its_new_tokens(server, tmp_path):
    before = evaluated(server)
    first = claude(server, tmp_path, "What is the capital of France? Answer in one word.")
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.strip(), first.stderr  # an answer was printed
    after_first = evaluated(server)
    tokens_1, seconds_1 = after_first[0] - before[0], after_first[1] - before[1]
    assert tokens_1 > 1500, "Claude Code's system prompt is ~1.9k tokens"

    start = time.monotonic()
    second = claude(server, tmp_path, "--continue", "And of Italy?")
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.strip()
    after_second = evaluated(server)
    tokens_2, seconds_2 = after_second[0] - after_first[0], after_second[1] - after_first[1]
    # the target evaluated only what is new (the first answer, the new prompt, Claude Code's per-turn
    # reminders); a prefill that re-read the prompt would take about as long as the first turn's
    assert 0 < tokens_2 < 0.1 * tokens_1, (tokens_1, tokens_2)
    assert seconds_2 < 0.25 * seconds_1, (seconds_1, seconds_2, time.monotonic() - start)


def test_a_prefill_slower_than_its_stream_watchdog_is_not_retried(smollm2_path, tmp_path):
    need_agent("claude")
    log = tmp_path / "acc.jsonl"
    # each prefill round of 32 tokens 0.4 s slower: Claude Code's ~1.9k-token prompt takes 24 s or
    # more (one suite run saw 11.4 s, not found why; at 0.6 s a round Claude Code once failed outright);
    # the answer ends at its first line: greedy SmolLM2 once ran on to 4096 tokens, and Claude Code's
    # continuation and compaction then passed the context (the date and the folder change its prompt)
    srv = Server(
        smollm2_path, "--n-ctx", "8192", "--parallel", "1", "--temperature", "0", "--lookup", "only",
        "--n-batch", "32", "--stream-keepalive", "1", "--log", str(log), "--stop", "\n", start_timeout=300,
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
    assert rec.prefill[main[0]] > IDLE_MS / 1e3, rec  # the prefill did outlast the watchdog
