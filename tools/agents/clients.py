"""How each agent is pointed at a `localspec serve`, as its own docs say for a local or custom
provider (docs/apps.md), in a temporary HOME (config, sessions, caches) and a work folder: one
`run(agent, ...)` that returns what the agent printed and how long it took. Each runs with its
default tools; only the network beyond the server is turned off (updates, telemetry, model lists)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NPM_BIN = ROOT / ".npm-clients" / "node_modules" / ".bin"
AIDER = ROOT / ".venv-aider" / "bin" / "aider"
BINARIES = {
    "codex": NPM_BIN / "codex",
    "claude": NPM_BIN / "claude",
    "opencode": NPM_BIN / "opencode",
    "aider": AIDER,
}
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TMPDIR", "TERM")
# Claude Code's model aliases (its docs, "Model configuration"): `--model default` is sent as its
# default Claude model (claude-opus-...), for which CLAUDE_CODE_MAX_CONTEXT_TOKENS does not apply
CLAUDE_ALIASES = ("default", "best", "sonnet", "opus", "haiku", "sonnet[1m]", "opus[1m]", "opusplan")


@dataclass(frozen=True)
class Endpoint:
    url: str  # http://127.0.0.1:PORT
    model: str  # the name the server gives its model
    n_ctx: int  # what the agent is told of the context window
    stream_idle_ms: int = 1_800_000  # the agent's wait for the next streamed event (Codex, Claude Code)
    # a 135M model's agent: the extras it loops on off (Codex's goal and sub-agent tools; Claude Code's
    # tools, ~11k tokens past SmolLM2's 8k training context)
    small_model: bool = False


@dataclass(frozen=True)
class Outcome:
    returncode: int | None  # None: the agent was stopped at the time limit
    stdout: str
    stderr: str
    seconds: float


def installed(agent: str) -> bool:
    return BINARIES[agent].exists()


def run(agent: str, ep: Endpoint, home: Path, work: Path, prompt: str, *, files: tuple[str, ...] = (),
        timeout: float = 1800) -> Outcome:  # fmt: skip
    """`agent` given `prompt` in `work`, once, non-interactive, with every tool call allowed."""
    home.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    argv, env = _SETUP[agent](ep, home, work, prompt, files)
    base = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    base |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "NO_COLOR": "1", "CI": "true"}
    t0 = time.monotonic()
    # a session of its own: at the time limit the whole group goes (Codex's native binary outlives
    # its node wrapper, and would keep its request running)
    p = subprocess.Popen(argv, cwd=work, env=base | env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        out, err = p.communicate(timeout=timeout)
        code = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        code = None
    finally:
        try:  # what the agent left running (a shell, a language server)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return Outcome(code, out, err, time.monotonic() - t0)


def _codex(ep: Endpoint, home: Path, work: Path, prompt: str, files: tuple[str, ...]) -> tuple[list, dict]:
    codex_home = home / ".codex"
    codex_home.mkdir(exist_ok=True)
    # a custom provider on the Responses wire API (Codex's docs, "model_providers"); no retries, so a
    # reconnect shows as one, never hides a stall
    (codex_home / "config.toml").write_text(
        f"""model = "{ep.model}"
model_provider = "localspec"
model_context_window = {ep.n_ctx}

[model_providers.localspec]
name = "localspec"
base_url = "{ep.url}/v1"
wire_api = "responses"
stream_idle_timeout_ms = {ep.stream_idle_ms}
stream_max_retries = 0
request_max_retries = 0
"""
        + ("\n[features]\ngoals = false\nmulti_agent = false\n" if ep.small_model else "")
    )
    argv = [str(BINARIES["codex"]), "exec", "--skip-git-repo-check", "--color", "never",
            "--dangerously-bypass-approvals-and-sandbox", prompt]  # fmt: skip
    return argv, {"CODEX_HOME": str(codex_home)}


def _claude(ep: Endpoint, home: Path, work: Path, prompt: str, files: tuple[str, ...]) -> tuple[list, dict]:
    env = {
        "ANTHROPIC_BASE_URL": ep.url,
        "ANTHROPIC_API_KEY": "sk-local",  # any key: the server asks for none here
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, updates, error reports
        "DISABLE_AUTOUPDATER": "1",
        "API_TIMEOUT_MS": str(ep.stream_idle_ms),
        # its watchdogs over a stream's bytes and events (the events' never under 5 minutes)
        "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS": str(ep.stream_idle_ms),
        "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(ep.stream_idle_ms),
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(ep.n_ctx),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
        "IS_SANDBOX": "1",  # as root, --dangerously-skip-permissions needs this said
    }
    # the served name: CLAUDE_CODE_MAX_CONTEXT_TOKENS applies to a model id not starting with claude-;
    # one that is an alias of Claude Code's gets another (a single-model server serves any name)
    model = f"local-{ep.model}" if ep.model in CLAUDE_ALIASES else ep.model
    argv = [str(BINARIES["claude"]), "-p", prompt, "--model", model, "--dangerously-skip-permissions"]
    if ep.small_model:
        argv += ["--tools", ""]
    return argv, env


def _opencode(ep: Endpoint, home: Path, work: Path, prompt: str, files: tuple[str, ...]) -> tuple[list, dict]:
    # an OpenAI-compatible provider (OpenCode's docs, "Custom provider"): chat completions
    cfg = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "localspec": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "localspec",
                "options": {"baseURL": f"{ep.url}/v1", "apiKey": "none"},
                "models": {
                    ep.model: {
                        "name": ep.model,
                        "tool_call": True,
                        "limit": {"context": ep.n_ctx, "output": 4096},
                    }
                },  # fmt: skip
            }
        },
        "model": f"localspec/{ep.model}",
        "autoupdate": False,
        "share": "disabled",
    }
    (home / ".config" / "opencode").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(cfg, indent=1))
    env = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
           "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1"}  # fmt: skip
    argv = [str(BINARIES["opencode"]), "run", "--auto", "--model", f"localspec/{ep.model}", prompt]
    return argv, env


def _aider(ep: Endpoint, home: Path, work: Path, prompt: str, files: tuple[str, ...]) -> tuple[list, dict]:
    # any OpenAI-compatible API (Aider's docs, "OpenAI compatible APIs"): chat completions through litellm
    meta = {f"openai/{ep.model}": {"max_input_tokens": ep.n_ctx, "max_output_tokens": 4096,
                                   "litellm_provider": "openai", "mode": "chat"}}  # fmt: skip
    (home / "models.json").write_text(json.dumps(meta))
    argv = [str(BINARIES["aider"]), "--model", f"openai/{ep.model}", "--openai-api-base", f"{ep.url}/v1",
            "--openai-api-key", "none", "--model-metadata-file", str(home / "models.json"),
            "--yes-always", "--no-git", "--no-check-update", "--analytics-disable", "--no-show-model-warnings",
            "--no-pretty", "--no-fancy-input", "--message", prompt, *files]  # fmt: skip
    return argv, {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "AIDER_CHECK_UPDATE": "false"}


_SETUP = {"codex": _codex, "claude": _claude, "opencode": _opencode, "aider": _aider}
