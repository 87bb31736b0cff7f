"""The agent tasks' outside checks (tools/agents/tasks.py) tell a task done from one not done, so
that an agent test can fail: each check against the folder a correct agent leaves, and against an
agent that did nothing or guessed."""

from __future__ import annotations

import subprocess
import sys

from tools.agents.tasks import COMMAND, CREATE, CREATE_LINE, FIX, HELLO, SCRIPT


def test_create_needs_the_file_with_the_line(tmp_path):
    CREATE.setup(tmp_path)
    assert CREATE.check(tmp_path, "Done.", "") == "notes.txt was not created"
    (tmp_path / "notes.txt").write_text("localspec was here, maybe\n")
    assert CREATE.check(tmp_path, "", "") is not None
    (tmp_path / "notes.txt").write_text(CREATE_LINE + "\n")
    assert CREATE.check(tmp_path, "", "") is None


def test_fix_needs_the_test_to_pass_unchanged(tmp_path):
    FIX.setup(tmp_path)
    assert "still fails" in FIX.check(tmp_path, "", "")
    (tmp_path / "test_calc.py").write_text("print('ok')\n")  # the test edited away
    assert FIX.check(tmp_path, "", "") == "the test itself was changed"
    FIX.setup(tmp_path)
    (tmp_path / "calc.py").write_text((tmp_path / "calc.py").read_text().replace("a - b", "a + b"))
    assert FIX.check(tmp_path, "", "") is None


def test_command_needs_what_only_running_the_script_prints(tmp_path):
    secret = COMMAND.setup(tmp_path)
    printed = subprocess.run([sys.executable, "code.py"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert printed.strip() == secret and secret not in (tmp_path / "code.py").read_text()
    assert COMMAND.check(tmp_path, f"It printed `{printed.strip()}`.", secret) is None
    assert COMMAND.check(tmp_path, "It printed a hash.", secret) is not None
    assert COMMAND.setup(tmp_path) != secret  # a new digest each time: no answer carries over


def test_hello_and_script_need_the_script_run(tmp_path):
    secret = HELLO.setup(tmp_path)
    printed = subprocess.run(
        [sys.executable, "hello.py"], cwd=tmp_path, capture_output=True, text=True
    ).stdout
    assert HELLO.check(tmp_path, f"It prints {printed.strip()}.", secret) is None
    assert HELLO.check(tmp_path, "It prints a hash.", secret) is not None
    code = SCRIPT.setup(tmp_path)
    assert (
        SCRIPT.check(tmp_path, "Done: build.txt written.", code)
        == "build.txt was not made: build.py did not run"
    )
    (tmp_path / "build.txt").write_text("0123456789ab\n")  # a guess
    assert SCRIPT.check(tmp_path, "", code) is not None
    subprocess.run([sys.executable, "build.py"], cwd=tmp_path, check=True, capture_output=True)
    assert SCRIPT.check(tmp_path, "", code) is None and code not in (tmp_path / "build.py").read_text()
