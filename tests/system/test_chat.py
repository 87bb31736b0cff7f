"""`localspec chat` end to end on SmolLM2 drafting for itself: in a pseudo-terminal (turns, prefix
reuse, Ctrl-C, commands, colours) and with piped stdin (plain answers, Unicode, context overflow)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from localspec.chat.conversation import Conversation

from ..helpers import png

ROOT = Path(__file__).resolve().parents[2]
PROMPT = ">>>"  # prompt_toolkit draws the trailing space as a cursor move
ANSWER_END = re.compile(r"\[\d+ tokens, [\d.]+ tok/s")  # the dim line after each answer
STATS_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s", re.M)  # turn prompt prefilled answer


def chat_args(model: Path, *extra: str) -> list[str]:
    return [
        "-m",
        "localspec",
        "chat",
        "--target",
        str(model),
        "--draft",
        str(model),
        "--draft-max",  # fixed: auto rightly drafts nothing with a draft as dear as its target
        "3",
        "--temperature",
        "0",
        *extra,
    ]


def clean_env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "LOCALSPEC_DEBUG")}
    # prompt_toolkit must not wait for cursor-position answers; history goes under tmp_path
    env.update(TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", XDG_STATE_HOME=str(tmp_path / "state"))
    env.update(more)
    return env


def spawn(tmp_path: Path, args: list[str]):  # noqa: ANN201
    child = pexpect.spawn(
        sys.executable,
        args,
        cwd=ROOT,
        env=clean_env(tmp_path),
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 200),
        # a suite started in the background (nohup, `&`) ignores SIGINT, and a child inherits that:
        # Python then installs no KeyboardInterrupt handler, and Ctrl-C could not stop an answer
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    child.expect_exact(PROMPT)
    return child


def ask(child, text: str) -> str:  # noqa: ANN001
    child.sendline(text)
    child.expect(ANSWER_END)
    answer = child.before
    child.expect_exact(PROMPT)
    return answer


def test_chat_in_a_terminal(tmp_path, smollm2_path):
    log = tmp_path / "acc.jsonl"
    child = spawn(tmp_path, chat_args(smollm2_path, "--max-tokens", "300", "--log", str(log)))
    first = ask(child, "Name three colors.")
    assert "\x1b[36m" in first  # accepted draft tokens are coloured on a terminal
    ask(child, "And three animals?")

    child.sendline("/stats")
    child.expect("answers, ")
    rows = [tuple(map(int, m)) for m in STATS_ROW.findall(child.before)]
    child.expect_exact(PROMPT)
    assert [r[0] for r in rows] == [1, 2], child.before
    (_, p1, f1, a1), (_, p2, f2, a2) = rows
    assert f1 == p1  # the first turn prefills everything
    # the second turn prefills only its own tokens: the first prompt and answer come from the cache
    assert f2 == p2 - p1 - a1, rows
    assert 0 < f2 < p2 / 2

    # Ctrl-C mid-answer: the answer stops, the prompt comes back, the next question is answered
    child.sendline("Write a long story about a dragon.")
    child.expect_exact("\x1b[?2004l")  # prompt_toolkit has handed the terminal back: generation runs
    child.expect(r"\w{3,}\W+\w+")  # some of the answer has streamed
    child.sendintr()
    child.expect_exact("(stopped)")
    child.expect_exact(PROMPT)
    assert ask(child, "What is two plus two?").strip()
    child.sendline("/reset")
    child.expect_exact("(conversation forgotten)")
    child.expect_exact(PROMPT)
    ask(child, "Name a fruit.")
    child.sendline("/stats")
    child.expect("4 answers, ")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 4 and {r["source"] for r in records} == {
        "chat"
    }  # the stopped answer is not logged
    # after /reset the prompt is the template's opening plus the question alone
    assert records[-1]["stats"]["n_prompt_tokens"] < records[1]["stats"]["n_prompt_tokens"]


@pytest.mark.parametrize("keys", ["\x03\x03", "\x04"], ids=["ctrl-c-twice", "ctrl-d"])
def test_chat_quits_at_the_prompt(tmp_path, smollm2_path, keys):
    child = spawn(tmp_path, chat_args(smollm2_path, "--no-log"))
    for key in keys:
        child.send(key)
        if key == "\x03" and key is not keys[-1]:
            child.expect_exact("Ctrl-C again")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def run_piped(tmp_path: Path, model: Path, lines: list[str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *chat_args(model, *extra)],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
        env=clean_env(tmp_path),
        timeout=300,
    )


def test_chat_piped_one_plain_answer_per_line(tmp_path, smollm2_path):
    log = tmp_path / "acc.jsonl"
    questions = ["Write the Chinese word for water.", "/reset", "Reply with three emoji."]
    proc = run_piped(tmp_path, smollm2_path, questions, "--max-tokens", "32", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b" not in out and "[" not in out.splitlines()[0]  # plain text: no colours, no stats line
    assert "\ufffd" not in out  # multi-byte characters split over tokens are never broken
    assert "水" in out and any(ord(c) >= 0x1F300 for c in out), out
    assert out.index("水") < min(i for i, c in enumerate(out) if ord(c) >= 0x1F300)
    assert len(log.read_text().splitlines()) == 2  # one generation per question line


def test_chat_piped_outgrowing_the_context(tmp_path, smollm2_path):
    unwritable = tmp_path / "a-file"
    unwritable.write_text("")
    lines = ["Name three colors."] * 4 + ["word " * 300, "Name a fruit."]
    proc = run_piped(
        tmp_path,
        smollm2_path,
        lines,
        "--n-ctx",
        "160",
        "--max-tokens",
        "32",
        "--log",
        str(unwritable / "x.jsonl"),
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "dropped the oldest" in proc.stderr
    assert "this message does not fit" in proc.stderr and "--n-ctx 160" in proc.stderr
    assert proc.stderr.count("cannot write the acceptance log") == 1  # one warning, however many answers
    assert proc.stdout.count("\n") >= 5  # every other line got its answer


class FakeTokenizer:
    """Characters as tokens; '<' stands for the template's separators."""

    def render_chat(self, messages: list[dict]) -> str:
        return "".join(f"<{m['role'][0]}>{m['content']}" for m in messages) + "<a>"

    def tokenize_chat(self, text: str, *, continuation: bool = False) -> list[int]:
        return ([] if continuation else [0]) + [ord(c) for c in text]


def test_conversation_keeps_the_generated_tokens():
    tok, conv = FakeTokenizer(), Conversation()
    text, ids = conv.prompt(tok, "hi")
    assert ids == [0] + [ord(c) for c in "<u>hi<a>"]
    answer_ids = [1001, 1002]  # tokens that re-tokenized text would not give back
    conv.add("hi", text, ids, "yo", answer_ids)
    _, ids2 = conv.prompt(tok, "more")
    assert ids2 == ids + answer_ids + [ord(c) for c in "<u>more<a>"]
    conv.set_system("be brief")  # the start changed: the whole conversation is tokenized again
    _, ids3 = conv.prompt(tok, "more")
    assert ids3 == tok.tokenize_chat(tok.render_chat(conv.messages("more")))
    conv.add("more", "", [], "x", None)  # an answer without trusted tokens: tokenized afresh next time
    assert conv.prompt(tok, "q")[1][0] == 0
    conv.drop_oldest()
    assert [u for u, _ in conv.turns] == ["more"]


def test_chat_piped_with_an_image(tmp_path, smollm2_path, mmproj_path):
    """`chat --image`: the first message carries it, and the follow-up turn runs on with its rows in
    the conversation."""
    answers = []
    for seed in (1, 2):
        img = tmp_path / f"{seed}.png"
        img.write_bytes(png(seed))
        log = tmp_path / f"{seed}.jsonl"
        extra = ("--mmproj", str(mmproj_path), "--image", str(img), "--max-tokens", "12", "--log", str(log))
        proc = run_piped(tmp_path, smollm2_path, ["What is in this picture?", "And its colours?"], *extra)
        assert proc.returncode == 0, proc.stderr
        assert len(log.read_text().splitlines()) == 2  # both questions answered
        answers.append(proc.stdout)
    assert answers[0] != answers[1], answers
