"""Codex CLI (npm @openai/codex, `make npm-clients`) against a real `localspec serve`, configured as its
docs say for a custom provider on the Responses wire API (tools/agents/clients.py). Its real task
on the real pair is in test_agents_real.py; its two turns on SmolLM2 in test_codex.py. Here SmolLM2 (cheap) shows, with one real
Codex turn, the stream and the prompt cache on disk: with each prefill round slowed past Codex's
stream idle timeout (set to 10 s) it does not reconnect; after a restart the same turn evaluates only
what follows the saved prefix, sooner, with the same answer; a damaged cache file is refused with one
line and the answer does not change. SmolLM2 is served as Ollama serves a model, with a mild repeat
penalty (greedy, a 135M model at a 10k-token prompt can repeat itself for good), and without Codex's
goal and sub-agent tools, which it loops on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localspec.engine.prompt_disk.store import SUFFIX
from tools.agents.clients import Endpoint, run
from tools.agents.record import Watch

from ..helpers import Server, need_agent

N_CTX = 16384
IDLE_MS = 10_000  # Codex's wait for the next streamed event: a loaded machine's server still answers in it
# opt-in (3 minutes): passed on a quiet machine in 183 s (5943 prompt tokens, time to first token 74 s
# slowed and cold, 0.07 s after the restart); the suite is at its 30-minute budget without it
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("LOCALSPEC_AGENT_TASKS") != "1", reason="LOCALSPEC_AGENT_TASKS=1 runs it"
    ),
]


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    need_agent("codex")


def smol(smollm2_path: Path, cache: Path, log: Path, *args: str, env: dict | None = None) -> Server:
    return Server(
        smollm2_path, "--n-ctx", str(N_CTX), "--parallel", "1", "--temperature", "0", "--repeat-penalty", "1.1",
        "--prompt-cache-dir", str(cache), "--log", str(log), *args, env=env, start_timeout=600,
    )  # fmt: skip


def turn(srv: Server, log: Path, home: Path, idle_ms: int = 1_800_000):  # noqa: ANN201
    ep = Endpoint(srv.url, srv.health()["model"], N_CTX, stream_idle_ms=idle_ms, small_model=True)
    watch = Watch(srv.url, log)
    out = run("codex", ep, home, home / "work", "Reply with one word: hello.", timeout=900)
    return out, watch.record()


def test_a_slow_prefill_a_restart_and_a_damaged_cache_file(smollm2_path, tmp_path):
    cache, log, home = tmp_path / "cache", tmp_path / "acc.jsonl", tmp_path / "home"
    # each prefill round of 128 tokens 0.5 s slower: Codex's ~10k-token prompt takes 40 s or more
    srv = smol(smollm2_path, cache, log, "--n-batch", "128", "--stream-keepalive", "1",
               env={"LOCALSPEC_TEST_PREFILL_DELAY": "0.5"})  # fmt: skip
    try:
        cold, rec_cold = turn(srv, log, home, idle_ms=IDLE_MS)
    finally:
        srv.stop()
    assert "Reconnecting" not in cold.stderr and "stream disconnected" not in cold.stderr, cold.stderr[-3000:]
    assert rec_cold.requests == 1 and rec_cold.cut == 0, rec_cold
    assert rec_cold.first_prefill_s > 2 * IDLE_MS / 1e3, rec_cold  # the prefill did outlast Codex's timer
    assert cold.returncode == 0 and cold.stdout.strip(), cold.stderr[-3000:]
    assert list(cache.glob(f"*{SUFFIX}")), "the prefix was saved"

    srv = smol(smollm2_path, cache, log)  # a restart
    try:
        warm, rec_warm = turn(srv, log, home)
    finally:
        srv.stop()
    n = rec_cold.prompts[0]
    # what follows the saved prefix: the turn's own lines (Codex's environment, the date) at most
    assert rec_warm.evaluated[0] < 0.05 * n, (rec_cold, rec_warm)
    assert warm.stdout == cold.stdout
    print(f"Codex on SmolLM2, {n} prompt tokens: time to first token {rec_cold.first_prefill_s:.1f} s cold "
          f"(slowed), {rec_warm.first_prefill_s:.2f} s after a restart")  # fmt: skip

    for f in cache.glob(f"*{SUFFIX}"):  # one byte changed in each saved state
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x40
        f.write_bytes(bytes(data))
    srv = smol(smollm2_path, cache, log)
    try:
        damaged, rec_damaged = turn(srv, log, home)
        output = srv.output()
    finally:
        srv.stop()
    refused = [line for line in output.splitlines() if " refused (" in line]
    assert 1 <= len(refused) <= 2 and all(line.startswith("prompt cache: ") for line in refused), output
    assert "Traceback" not in output
    assert rec_damaged.evaluated[0] > 0.9 * n, rec_damaged  # evaluated as if the file were not there
    assert damaged.stdout == cold.stdout
