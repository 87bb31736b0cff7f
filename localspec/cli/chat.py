"""`localspec chat`: a multi-turn chat in the terminal, streaming, with accepted draft tokens in
colour; with piped stdin, one plain answer per input line (for scripts)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import click

from localspec.cli.common import image_option, read_images, resolve_settings, settings_options

DRAFT_STYLE = "cyan"  # accepted draft tokens
PROMPT = ">>> "
HELP_TEXT = """commands:
  /reset        forget the conversation (the system prompt stays)
  /stats        prompt, prefilled and generated tokens per turn; acceptance
  /system TEXT  set the system prompt (no TEXT: remove it)
  /colors       accepted draft tokens in colour: on/off
  /exit         quit (also Ctrl-D, or Ctrl-C twice at the prompt)
Ctrl-C during an answer stops it."""


@click.command()
@settings_options("model", "images", "sampling", "spec", "log")
@click.option("--system", "system", default=None, help="System prompt.")
@image_option
def chat(system: str | None, image_files: tuple, **kwargs: Any) -> None:
    """Chat with a model; with no model given, the embedded default pair (built first if missing)."""
    from localspec.engine import Engine  # noqa: PLC0415
    from localspec.telemetry.acclog import AccLog  # noqa: PLC0415 - keep --help instant

    settings = _settings(kwargs)
    images = read_images(image_files, settings)  # shown with the first message
    screen = Screen(tty=sys.stdin.isatty() and sys.stdout.isatty())
    acclog = AccLog(settings, source="chat", warn=screen.note)
    if screen.tty:
        screen.note(
            f"loading {settings.target.name}"
            + (f" + draft {settings.draft.name}" if settings.speculative else "")
        )
    with Engine(settings, log=lambda msg: click.echo(msg, err=True)) as engine:
        session = ChatSession(engine, settings, screen, acclog, system)
        session.conv.images = images
        if screen.tty:
            screen.note("type a message; /help for commands")
            _repl(session)
        else:
            for line in sys.stdin:
                if not session.handle(line):
                    break


def _settings(kwargs: dict[str, Any]):  # noqa: ANN202
    """Settings from the flags; with no model named anywhere, the default pair (built if missing)."""
    from localspec.cli.models import build_default_pair  # noqa: PLC0415
    from localspec.paths import default_pair  # noqa: PLC0415

    given = dict(kwargs)
    settings = resolve_settings(kwargs)
    if settings.target is None and settings.draft is None:
        if not (default_pair() / "pair.toml").exists():
            click.echo("no model given and models/default is not built yet: building it now (once)", err=True)
            build_default_pair()
        settings = resolve_settings({**given, "pair": default_pair()})
    return settings


def _repl(session: "ChatSession") -> None:
    from prompt_toolkit import PromptSession  # noqa: PLC0415
    from prompt_toolkit.history import FileHistory, InMemoryHistory  # noqa: PLC0415

    try:
        from localspec import paths  # noqa: PLC0415
        from localspec.files import PRIVATE_FILE, private_dir  # noqa: PLC0415

        path = paths.chat_history()
        private_dir(path.parent)  # what the user typed: theirs alone, as the acceptance log
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE))
        history = FileHistory(str(path))
    except OSError:
        history = InMemoryHistory()
    prompt = PromptSession(history=history)
    armed = False  # a first Ctrl-C at the prompt arms, a second one quits
    while True:
        try:
            line = prompt.prompt(PROMPT)
        except KeyboardInterrupt:
            if armed:
                return
            armed = True
            session.screen.note("(Ctrl-C again, Ctrl-D or /exit to quit)")
            continue
        except EOFError:
            return
        armed = False
        if not session.handle(line):
            return


class Screen:
    """Where answers and notes go: a terminal (rich, colours) or plain stdout/stderr for scripts."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.colors = tty and not os.environ.get("NO_COLOR")
        self._console = None
        if tty:
            from rich.console import Console  # noqa: PLC0415

            self._console = Console(highlight=False, emoji=False, markup=False, soft_wrap=True)

    def answer(self, text: str, from_draft: bool = False) -> None:
        if not text:
            return
        if self._console is not None:
            self._console.print(text, style=DRAFT_STYLE if from_draft and self.colors else None, end="")
        else:
            sys.stdout.write(text)
            sys.stdout.flush()

    def out(self, text: str) -> None:
        """Output asked for (a command's answer)."""
        if self._console is not None:
            self._console.print(text)
        else:
            print(text, flush=True)

    def note(self, text: str) -> None:
        """A side remark: dim on a terminal, stderr for scripts (stdout stays the answers only)."""
        if self._console is not None:
            self._console.print(text, style="dim")
        else:
            print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TurnRow:
    prompt: int
    prefilled: int
    answer: int
    tok_s: float
    drafted: int
    accepted: int


class ChatSession:
    def __init__(self, engine, settings, screen: Screen, acclog, system: str | None) -> None:  # noqa: ANN001
        from localspec.chat.conversation import Conversation  # noqa: PLC0415

        self.engine, self.settings, self.screen, self.acclog = engine, settings, screen, acclog
        self.conv = Conversation(system=system)
        self.rows: list[TurnRow] = []

    # -- input -----------------------------------------------------------------------------------
    def handle(self, line: str) -> bool:
        """One input line: a command or a message. False means quit."""
        from localspec.errors import LocalspecError  # noqa: PLC0415

        line = line.strip()
        if not line:
            return True
        if line.startswith("/"):
            return self.command(line)
        try:
            self.ask(line)
        except LocalspecError as e:
            self.screen.note(f"error: {e}")
        return True

    def command(self, line: str) -> bool:
        name, _, arg = line.partition(" ")
        if name in ("/exit", "/quit"):
            return False
        if name == "/reset":
            self.conv.reset()
            self.screen.note("(conversation forgotten)")
        elif name == "/stats":
            self.screen.out(self.stats_text())
        elif name == "/system":
            self.conv.set_system(arg.strip())
            self.screen.note(f"(system prompt {'set' if arg.strip() else 'removed'})")
        elif name == "/colors":
            self.screen.colors = not self.screen.colors and self.screen.tty
            self.screen.note(f"(colours {'on' if self.screen.colors else 'off'})")
        elif name == "/help":
            self.screen.out(HELP_TEXT)
        else:
            self.screen.note(f"unknown command {name}; /help lists them")
        return True

    # -- one turn --------------------------------------------------------------------------------
    def ask(self, user: str) -> None:
        fitted = self._prompt_that_fits(user)
        if fitted is None:
            return
        text, ids = fitted
        started = time.time()
        from localspec.chat.media import Prompt  # noqa: PLC0415

        handle = self.engine.submit(Prompt(ids, self.conv.runs))  # ids with image ids: as tokenized
        parts: list[str] = []
        try:
            for chunk in handle:
                self.screen.answer(chunk.text, bool(chunk.from_draft) and all(chunk.from_draft))
                parts.append(chunk.text)
        except KeyboardInterrupt:
            handle.cancel()
            self._drain(handle, parts)
        self.screen.answer("\n")
        resp = handle.response
        if resp is None:  # stopped: keep what was shown, so the conversation matches the screen
            self.screen.note("(stopped)")
            if "".join(parts).strip():
                self.conv.add(user, text, ids, "".join(parts), None)
            return
        # with stop strings the text may end before the tokens do: then tokenize afresh next turn
        self.conv.add(user, text, ids, resp.text, None if self.settings.stop else resp.tokens)
        self.acclog.write(resp, self.settings, started=started)
        st = resp.stats
        self.rows.append(
            TurnRow(len(ids), st.n_prefilled, len(resp.tokens), st.decode_tok_s, st.n_drafted, st.n_accepted)
        )
        self.screen.note(self.answer_line(st))
        if resp.finish_reason == "context":
            self.screen.note(
                f"(the context is full at n_ctx={self.settings.n_ctx}: the oldest turns will be dropped "
                "next time; /reset starts over)"
            )

    def _drain(self, handle, parts: list[str]) -> None:  # noqa: ANN001
        """Take what the worker still delivers after cancel(); it stops at its next token."""
        while True:
            try:
                for chunk in handle:
                    self.screen.answer(chunk.text, False)
                    parts.append(chunk.text)
                return
            except KeyboardInterrupt:
                continue

    def _prompt_that_fits(self, user: str) -> tuple[str, list[int]] | None:
        """The prompt for `user`, dropping the oldest turns (announced) while it outgrows n_ctx."""
        from localspec.chat.conversation import Conversation  # noqa: PLC0415

        def fits(ids: list[int]) -> bool:
            return len(ids) + self.settings.max_tokens <= self.settings.n_ctx

        text, ids = self.conv.prompt(self.engine, user)
        if fits(ids):
            return text, ids
        alone = Conversation(system=self.conv.system).prompt(self.engine, user)[1]
        if not fits(alone):
            self.screen.note(
                f"this message does not fit: {len(alone)} prompt tokens + --max-tokens "
                f"{self.settings.max_tokens} > --n-ctx {self.settings.n_ctx}; shorten it or raise --n-ctx"
            )
            return None
        dropped = 0
        while not fits(ids):
            self.conv.drop_oldest()
            dropped += 1
            text, ids = self.conv.prompt(self.engine, user)
        self.screen.note(
            f"(the conversation outgrew --n-ctx {self.settings.n_ctx}: dropped the oldest {dropped} "
            "turn(s); /reset starts over)"
        )
        return text, ids

    # -- formatting ------------------------------------------------------------------------------
    def k_policy(self) -> str:
        if not self.settings.speculative:
            return "no draft"
        k = self.settings.draft_k
        return "K auto" if k is None else f"K={k}"

    def answer_line(self, st) -> str:  # noqa: ANN001
        line = f"[{st.n_generated} tokens, {st.decode_tok_s:.1f} tok/s"
        if st.speculative:
            line += f", acceptance {st.acceptance_rate:.0%}, mean accepted {st.mean_accepted_len:.2f}"
            if st.k_history:
                line += f", {self.k_policy()} (last {st.k_history[-1]})"
        else:
            line += f", {self.k_policy()}"
        return line + "]"

    def stats_text(self) -> str:
        if not self.rows:
            return "no answers yet"
        lines = [f"{'turn':>4} {'prompt':>7} {'prefilled':>9} {'answer':>7} {'tok/s':>7} {'accept':>7}"]
        for i, r in enumerate(self.rows, 1):
            acc = f"{r.accepted / r.drafted:.0%}" if r.drafted else "-"
            lines.append(f"{i:>4} {r.prompt:>7} {r.prefilled:>9} {r.answer:>7} {r.tok_s:>7.1f} {acc:>7}")
        drafted = sum(r.drafted for r in self.rows)
        accepted = sum(r.accepted for r in self.rows)
        n = len(self.rows)
        total = f"{n} answer{'s' if n != 1 else ''}, {sum(r.answer for r in self.rows)} tokens"
        if drafted:
            total += f", acceptance {accepted / drafted:.0%} ({accepted}/{drafted}), {self.k_policy()}"
        return "\n".join(lines + [total])
