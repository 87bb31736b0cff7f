"""An answer's text -> content, reasoning and tool-call deltas, for one request: the family's
parser when tools may be called, content alone when not, behind the reasoning splitter when the
template thinks and reasoning is separated."""

from __future__ import annotations

from typing import Iterable

from localspec.chat.deltas import Delta, Message, assemble
from localspec.chat.families import Family
from localspec.chat.parsers.base import Parser
from localspec.chat.reasoning import Reasoning, has_reasoning, opened_by_prompt

REASONING_FORMATS = ("auto", "deepseek", "none")  # llama-server's names; auto = deepseek here


def answer_parser(
    family: Family,
    *,
    tools: bool,
    template: str | None = None,
    prompt: str = "",
    reasoning_format: str = "auto",
    tool_names: Iterable[str] = (),
) -> Parser | Reasoning:
    """`tool_names`: the declared tools, which a call written without its family's markers must name."""
    inner = family.parser(tool_names) if tools else Parser()
    if reasoning_format == "none" or (reasoning_format == "auto" and not has_reasoning(template)):
        return inner  # "deepseek" splits a leading <think> block whatever the template says
    return Reasoning(inner, opened=opened_by_prompt(prompt))


def parse_answer(parser: Parser | Reasoning, text: str) -> tuple[Message, list[Delta]]:
    """A whole answer: the message and the deltas it is made of."""
    deltas = parser.feed(text) + parser.finish()
    return assemble(deltas), deltas
