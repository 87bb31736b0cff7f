"""Small real tasks an agent is given in an empty work folder, each checked from outside: what the
folder holds afterwards, or what the agent printed. `check` returns None when the task was done, or
what was wrong, in a line."""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    setup: Callable[[Path], str]  # fills the work folder; returns what check needs (a secret, ...)
    check: Callable[[Path, str, str], str | None]  # (work folder, agent's stdout, setup's value)
    files: tuple[str, ...] = ()  # the files an agent that takes a file list (Aider) is given


# -- a file created with the asked content ------------------------------------------------------
CREATE_LINE = "localspec was here"


def _create_setup(work: Path) -> str:
    return ""


def _create_check(work: Path, out: str, _: str) -> str | None:
    f = work / "notes.txt"
    if not f.exists():
        return "notes.txt was not created"
    text = f.read_text(errors="replace").strip()
    return None if text == CREATE_LINE else f"notes.txt holds {text[:80]!r}"


CREATE = Task(
    "create",
    f"Create a file named notes.txt in the current folder whose only content is the line: {CREATE_LINE}",
    _create_setup,
    _create_check,
    files=("notes.txt",),
)


# -- a bug fixed so that a given test passes ----------------------------------------------------
def _fix_setup(work: Path) -> str:
    (work / "calc.py").write_text('def add(a, b):\n    """The sum of a and b."""\n    return a - b\n')
    (work / "test_calc.py").write_text("from calc import add\n\nassert add(2, 3) == 5\nprint('ok')\n")
    return ""


def _fix_check(work: Path, out: str, _: str) -> str | None:
    if "assert add(2, 3) == 5" not in (work / "test_calc.py").read_text():
        return "the test itself was changed"
    r = subprocess.run([sys.executable, "test_calc.py"], cwd=work, capture_output=True, text=True, timeout=30)
    return None if r.returncode == 0 else f"test_calc.py still fails: {r.stderr.strip().splitlines()[-1:]}"


FIX = Task(
    "fix",
    "The test test_calc.py fails. Fix the bug in calc.py so that `python3 test_calc.py` passes. "
    "Do not change test_calc.py.",
    _fix_setup,
    _fix_check,
    files=("calc.py",),
)


# -- a command run and its output reported ------------------------------------------------------
def _command_setup(work: Path, name: str = "code.py") -> str:
    # a digest no model can work out from the script: only running it tells
    seed = secrets.token_hex(8)
    (work / name).write_text(f"import hashlib\n\nprint(hashlib.sha256(b'{seed}').hexdigest()[:12])\n")
    return hashlib.sha256(seed.encode()).hexdigest()[:12]


def _command_check(work: Path, out: str, code: str) -> str | None:
    return None if code in out.lower() else "the script's output is not in the answer"


COMMAND = Task(
    "command",
    "Run the command `python3 code.py` in the current folder and tell me exactly what it printed.",
    _command_setup,
    _command_check,
)

# the same, asked as a user asks it (Codex's 1.5B, after running it, writes the output into its
# write_stdin tool instead of answering: HELLO and SCRIPT tell the phrasing from the model's habit)
HELLO = Task(
    "hello", "Run `python3 hello.py` and tell me what it prints.",
    lambda work: _command_setup(work, "hello.py"), _command_check,
)  # fmt: skip

# the same, the tool named as a user of Claude Code names it (its 1.5B, asked without it, mostly
# starts a sub-agent or calls a tool it does not have: docs/apps.md)
BASH = Task(
    "bash", "Use the Bash tool to run `python3 code.py`, then tell me exactly what it printed.",
    _command_setup, _command_check,
)  # fmt: skip


# -- a command run: its effect checked in the folder --------------------------------------------
def _script_setup(work: Path) -> str:
    seed = secrets.token_hex(8)
    (work / "build.py").write_text(
        "import hashlib\nfrom pathlib import Path\n\n"
        f"Path('build.txt').write_text(hashlib.sha256(b'{seed}').hexdigest()[:12] + '\\n')\nprint('built')\n"
    )
    return hashlib.sha256(seed.encode()).hexdigest()[:12]


def _script_check(work: Path, out: str, code: str) -> str | None:
    f = work / "build.txt"
    if not f.exists():
        return "build.txt was not made: build.py did not run"
    return None if f.read_text().strip() == code else "build.txt does not hold what build.py writes"


SCRIPT = Task("script", "Run `python3 build.py` in the current folder.", _script_setup, _script_check)
# the same, the tool named (as BASH)
BUILD = Task(
    "build", "Use the Bash tool to run `python3 build.py` in the current folder.", _script_setup, _script_check
)  # fmt: skip

TASKS = {t.name: t for t in (CREATE, FIX, COMMAND, HELLO, BASH, SCRIPT, BUILD)}
