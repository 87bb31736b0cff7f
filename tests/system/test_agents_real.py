"""Real agents finish real tasks on the real pair (issue 57): Codex CLI (Responses), Claude Code
(Messages), OpenCode (chat completions, its OpenAI-compatible provider) and Aider (chat completions,
through litellm), each pinned (`make npm-clients aider`), each with its default tools and its full
prompt, in a temporary HOME and work folder, against one `localspec serve` on models/default
(Qwen2.5-Coder 1.5B + 0.5B, speculation on, the default `auto`). Each gets the cheapest task that
shows it works, checked from outside (tools/agents/tasks.py): Claude Code (told to use its Bash tool)
and Codex run a script whose effect is checked in the folder, OpenCode creates a file, Aider fixes
a bug so that a test passes (it has no tool that runs commands). Every agent request
after an agent's first evaluates only what is new.
The grid of every task x agent, with the figures, is `python -m tools.agents` (docs/apps.md)."""

from __future__ import annotations

import os

import pytest

from tools.agents.clients import Endpoint, run
from tools.agents.record import Watch
from tools.agents.tasks import BUILD, CREATE, FIX, SCRIPT, Task

from ..helpers import Server, need_agent

N_CTX = 32768
# Aider's task runs in the suite (22 s). The others are opt-in (LOCALSPEC_AGENT_TASKS=1): each first
# turn is a 7-12k-token prefill, 3-6+ minutes on a quiet 2-core CPU. OpenCode's test passed (232 s,
# docs/apps.md's table). Codex's passed greedy; its other tasks fail on the model (docs/apps.md).
# Claude Code's `command` fails on the model (the same first turn on llama-server gave a fenced TaskStop
# call, a fenced ScheduleWakeup call, a made-up <system-reminder>); its `build` passed greedy (below)
pytestmark = pytest.mark.slow
opt_in = pytest.mark.skipif(
    os.environ.get("LOCALSPEC_AGENT_TASKS") != "1", reason="LOCALSPEC_AGENT_TASKS=1 runs them"
)
TIMEOUT_S = 900  # per task: a loop or a stall fails in CI's time, not after it


def serve(real_pair, tmp_path_factory, *args: str):  # noqa: ANN001, ANN201
    log = tmp_path_factory.mktemp("agents") / "acc.jsonl"
    srv = Server(
        real_pair, "--n-ctx", str(N_CTX), "--parallel", "1", "--log", str(log), *args, start_timeout=300
    )
    srv.acclog = log
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def server(real_pair, tmp_path_factory):
    yield from serve(real_pair, tmp_path_factory)


@pytest.fixture(scope="module")
def greedy_server(real_pair, tmp_path_factory):
    """The server at temperature 0 (Codex and Claude Code send none): Codex's task passed 3 of 3 greedy
    and 3 of 4 at the default 0.8 (docs/apps.md); greedy, the same prompt gives the same calls on
    llama-server."""
    yield from serve(real_pair, tmp_path_factory, "--temperature", "0")


def agent_does(agent: str, task: Task, server: Server, tmp_path, min_prompt: int):  # noqa: ANN001, ANN201
    """The agent given the task once; the record of what the server did. `min_prompt`: the size
    that tells the agent's own turns from its side calls (a title, a quota check)."""
    need_agent(agent)
    ep = Endpoint(server.url, server.health()["model"], N_CTX)
    work = tmp_path / "work"
    work.mkdir()
    secret = task.setup(work)
    watch = Watch(server.url, server.acclog)
    out = run(agent, ep, tmp_path / "home", work, task.prompt, files=task.files, timeout=TIMEOUT_S)
    rec = watch.record()
    print(f"{agent} {task.name}: {out.seconds:.0f} s; {rec.brief()}")
    assert out.returncode is not None, f"{agent} did not finish in {TIMEOUT_S} s"
    assert task.check(work, out.stdout, secret) is None, (out.stdout[-2000:], out.stderr[-3000:])
    assert out.returncode == 0, out.stderr[-3000:]
    # nothing cut off, every request served with speculation on; how many drafts is auto's call (after
    # OpenCode's turns on one server it ran Aider's request plain: drafts did not pay there)
    assert rec.cut == 0 and rec.speculative == rec.requests, rec
    turns = [i for i, n in enumerate(rec.prompts) if n > min_prompt]
    assert turns, rec
    assert all(rec.evaluated[i] < 0.2 * rec.prompts[turns[0]] for i in turns[1:]), rec  # the rest: cached
    return rec, turns


@opt_in
def test_codex_runs_a_script(greedy_server, tmp_path):
    # after the command, the 1.5B often calls write_stdin with its output (llama-server's greedy does
    # the same on the same prompt) and answers nothing: a task checked by its effect, not the answer
    rec, turns = agent_does("codex", SCRIPT, greedy_server, tmp_path, min_prompt=5000)  # ~8.6k: its prompt
    assert len(turns) >= 2  # the command, then what came after it


@opt_in
def test_claude_code_runs_a_script(greedy_server, tmp_path):
    # the tool named in the task: asked without it, the 1.5B mostly starts a sub-agent or calls a
    # tool Claude Code does not have (on llama-server too). It then calls Bash right (5 of 6), but
    # mostly makes up the output it reports (llama-server renders the same prompt): a task checked by
    # its effect, greedy as Codex's (Claude Code sends no temperature); docs/apps.md
    rec, turns = agent_does("claude", BUILD, greedy_server, tmp_path, min_prompt=5000)
    assert len(turns) >= 2


@opt_in
def test_opencode_creates_a_file(server, tmp_path):
    rec, turns = agent_does("opencode", CREATE, server, tmp_path, min_prompt=3000)
    assert len(turns) >= 1


def test_aider_fixes_a_bug_so_the_test_passes(server, tmp_path):
    agent_does("aider", FIX, server, tmp_path, min_prompt=500)
