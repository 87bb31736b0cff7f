"""A chat template is a program from the model file: rendered with a time and a size bound, so one
that loops or grows without end is one clear error (a 400 in the server), never a hung server.

- time: a trace function runs in the template's own frames (code compiled from "<template>") and
  stops the render once RENDER_S has passed: a Python-level loop cannot escape it, with or without
  calls in its body (the sandbox's call hook alone would miss `{% for a in r %}{% for b in r %}`);
- size: the output is counted as it is generated, and what makes a string or a list grow in a loop
  (`*`, `+`, `**` checked before they allocate, `~` once built) stops at RENDER_CHARS, so doubling a
  string never reaches gigabytes before the clock stops it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localspec.errors import LocalspecError

RENDER_S = 2.0  # real templates render in milliseconds (a 1,000-message conversation: ~0.1 s)
RENDER_CHARS = 16 << 20  # far more than any context holds; the body limit is 8 MB
MAX_EXPONENT = 1 << 16  # `**`: big enough for any arithmetic a template does


class TemplateTooBig(LocalspecError):
    pass


class _CodeGenerator(CodeGenerator):
    def visit_Concat(self, node: Any, frame: Any) -> None:
        """`a ~ b` checked once built: each doubling of a string stays below twice the bound."""
        self.write("environment.sized(")
        super().visit_Concat(node, frame)
        self.write(")")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "+", "**"})
    code_generator_class = _CodeGenerator

    @staticmethod
    def sized(value: str) -> str:
        if len(value) > RENDER_CHARS:
            raise TemplateTooBig(f"the chat template builds a value beyond {RENDER_CHARS} characters")
        return value

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > MAX_EXPONENT:
            raise TemplateTooBig(f"the chat template raises to a power above {MAX_EXPONENT}")
        if operator in ("*", "+") and _size(operator, left, right) > RENDER_CHARS:
            raise TemplateTooBig(f"the chat template builds a value beyond {RENDER_CHARS} characters")
        return super().call_binop(context, operator, left, right)


def _size(operator: str, left: Any, right: Any) -> int:
    seq = (str, list, tuple)
    if operator == "+":
        return len(left) + len(right) if isinstance(left, seq) and isinstance(right, seq) else 0
    for a, n in ((left, right), (right, left)):
        if isinstance(a, seq) and isinstance(n, int) and not isinstance(n, bool):
            return len(a) * n
    return 0


def render(template: Any, variables: dict[str, Any]) -> str:
    """`template.render(**variables)` within RENDER_S and RENDER_CHARS."""
    deadline = time.monotonic() + RENDER_S

    def in_template(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise TemplateTooBig(
                f"the chat template took more than {RENDER_S:g} s to render (does it loop without end?)"
            )
        return in_template

    def calls(frame: Any, event: str, arg: Any) -> Any:
        return in_template if frame.f_code.co_filename == "<template>" else None

    previous = sys.gettrace()
    if previous is None:  # a debugger's or coverage's tracer is left alone: the size bounds still hold
        sys.settrace(calls)
    try:
        return "".join(_bounded(template.generate(**variables)))
    finally:
        if previous is None:
            sys.settrace(None)


def _bounded(pieces: Iterator[str]) -> Iterator[str]:
    n = 0
    for piece in pieces:
        n += len(piece)
        if n > RENDER_CHARS:
            raise TemplateTooBig(f"the chat template's output grew beyond {RENDER_CHARS} characters")
        yield piece
