"""A request's constraint -> a checked llguidance grammar, ready to hand out matchers.

Kinds: a JSON schema (OpenAI's `response_format: json_schema`), JSON mode (`json_object`: any JSON
object), a grammar (llama-server's `grammar` field: GBNF, or Lark as llguidance writes it) and a
regex. Everything a person can get wrong comes back as one ConstraintError line carrying
llguidance's own message; the text is size-limited and llguidance's fuel limits bound the compile.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

import llguidance

from ..errors import Busy
from .depth import too_deep
from .errors import ConstraintError
from .matcher import Matcher
from .numbers import bounded
from .vocab import Vocabulary

Kind = Literal["json_schema", "json_object", "grammar", "lark", "regex"]
KINDS: tuple[str, ...] = ("json_schema", "json_object", "grammar", "lark", "regex")
MAX_TEXT_BYTES = 64 * 1024  # a schema or grammar bigger than this is refused before compiling
GRAMMAR_CACHE = 32  # compiled grammars kept per vocabulary
COMPILE_TIMEOUT_S = 5.0  # and one that compiles longer than this (2,000 optional keys: ~0.6 s)
# llguidance cannot be stopped: a compile given up on runs to its end. At most this many run at once,
# those given up on included, so hostile grammars sent again and again cannot pile up on the CPUs.
MAX_COMPILES = 2
_compiling = threading.BoundedSemaphore(MAX_COMPILES)

# llguidance's own resource limits, spelled out so a hostile grammar is refused, not slow: the
# compile's lexer fuel (~50k/ms), grammar size, per-step lexer fuel (~14k/ms) and Earley items
# (~20k/ms) - so a mask step stays under ~15 ms. They do not bound everything a compile does (a
# schema's optional keys cost quadratic time), hence the size limit and the timeout.
LIMITS = dict(
    initial_lexer_fuel=1_000_000,
    max_grammar_size=500_000,
    step_lexer_fuel=200_000,
    step_max_items=50_000,
    max_lexer_states=250_000,
    verbose_errors=False,  # short messages that do not echo parser state back to the client
)

# JSON is generated compact (`{"a":1,"b":[2,3]}`): no whitespace to wander into, and every key,
# colon and quote the schema fixes becomes a forced token. A schema's own "x-guidance" overrides it.
JSON_DEFAULTS = {"whitespace_flexible": False}


@dataclass(frozen=True, kw_only=True)
class Constraint:
    """What a request asks for, before compiling. `text`: the schema as JSON text, the grammar or the
    regex (unused for json_object). `strict` (JSON schema): refuse keywords llguidance cannot
    enforce; strict=False ignores them (OpenAI's best effort), and the output may then not validate."""

    kind: Kind
    text: str = ""
    strict: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConstraintError(f"unknown constraint kind {self.kind!r}; use one of {', '.join(KINDS)}")


@dataclass(frozen=True, eq=False)
class Grammar:
    """A compiled constraint for one vocabulary. `matcher()` gives each sequence its own state."""

    constraint: Constraint
    vocab: Vocabulary
    source: str  # llguidance's grammar (JSON text)
    warnings: tuple[str, ...] = ()
    _proto: llguidance.LLMatcher = field(repr=False, default=None)  # type: ignore[assignment]

    def matcher(self) -> Matcher:
        # a copy of the compiled start state: building a matcher from `source` would compile again
        return Matcher(self._proto.deep_copy(), self.vocab)


def compile_constraint(
    c: Constraint, vocab: Vocabulary, *, max_bytes: int = MAX_TEXT_BYTES, timeout_s: float = COMPILE_TIMEOUT_S
) -> Grammar:
    """Compile and check `c` for `vocab`; raises ConstraintError naming what is wrong. The last few
    grammars compiled for a vocabulary are kept: a client sends the same schema again and again."""
    with vocab.lock:
        hit = vocab.grammars.get(c)
        if hit is not None:
            vocab.grammars.move_to_end(c)
            return hit
    g = _compile(c, vocab, max_bytes, timeout_s)
    with vocab.lock:
        vocab.grammars[c] = g
        while len(vocab.grammars) > GRAMMAR_CACHE:
            vocab.grammars.popitem(last=False)
    return g


def _compile(c: Constraint, vocab: Vocabulary, max_bytes: int, timeout_s: float) -> Grammar:
    size = len(c.text.encode("utf-8"))
    if size > max_bytes:
        raise ConstraintError(f"the {_what(c)} is {size} bytes; the limit is {max_bytes} bytes")
    source = _source(c)
    limits = llguidance.LLParserLimits(**LIMITS)
    # building the matcher is the check: it compiles against the vocabulary, within the limits, and
    # enters an error state carrying llguidance's message (validate_grammar would compile twice)
    proto = _build(vocab, source, limits, timeout_s)
    if proto is None:
        raise ConstraintError(f"the {_what(c)} took over {timeout_s:g} s to compile; simplify it")
    if proto.is_error():
        raise ConstraintError(f"invalid {_what(c)}: {_one_line(proto.get_error())}")
    warnings = tuple(_one_line(w) for w in proto.get_grammar_warnings())
    return Grammar(c, vocab, source, warnings, proto)


def _build(vocab: Vocabulary, source: str, limits, timeout_s: float) -> llguidance.LLMatcher | None:
    """The matcher, or None when compiling outlasts timeout_s. llguidance compiles without the GIL,
    so a thread can be waited on with a timeout; a compile given up on finishes in the background,
    holding one of the MAX_COMPILES places until it does (Busy when none frees within timeout_s)."""
    t0 = time.monotonic()
    if not _compiling.acquire(timeout=timeout_s):
        raise Busy(
            f"{MAX_COMPILES} grammar compiles are still running (ones that ran past their "
            f"{timeout_s:g} s limit finish in the background); retry shortly"
        )
    box: list[llguidance.LLMatcher] = []

    def work() -> None:
        try:
            box.append(llguidance.LLMatcher(vocab.tokenizer, source, log_level=0, limits=limits))
        finally:
            _compiling.release()

    worker = threading.Thread(target=work, name="localspec-constraint-compile", daemon=True)
    worker.start()
    worker.join(max(timeout_s - (time.monotonic() - t0), 0.0))
    return box[0] if box else None


def _source(c: Constraint) -> str:
    """The llguidance grammar text for `c` (not yet checked against a tokenizer)."""
    try:
        if c.kind == "json_object":
            schema = bounded({"type": "object"})
            return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_DEFAULTS)
        if c.kind == "json_schema":
            return llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(bounded(_schema(c.text))),
                defaults=JSON_DEFAULTS,
                overrides={"lenient": not c.strict},
            )
        if c.kind == "grammar":  # GBNF is converted to Lark; Lark passes through
            return llguidance.grammar_from("grammar", c.text)
        if c.kind == "lark":
            return llguidance.LLMatcher.grammar_from_lark(c.text)
        return llguidance.LLMatcher.grammar_from_regex(c.text)
    except ValueError as e:
        raise ConstraintError(f"invalid {_what(c)}: {_one_line(str(e))}") from None


def _schema(text: str) -> dict | bool:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConstraintError(f"the JSON schema is not JSON: {e}") from None
    except RecursionError:  # json.loads nests by recursion: deeper than any limit we take
        raise ConstraintError(too_deep("the JSON schema")) from None
    if not isinstance(schema, (dict, bool)):
        raise ConstraintError(f"a JSON schema is an object (or true/false), not {type(schema).__name__}")
    return schema


def _what(c: Constraint) -> str:
    return {
        "json_schema": "JSON schema",
        "json_object": "JSON mode",
        "grammar": "grammar",
        "lark": "Lark grammar",
    }.get(c.kind, c.kind)


def _one_line(message: str) -> str:
    """llguidance's message on one line, without the source excerpt and caret lines it adds."""
    lines = [ln for ln in message.splitlines() if not _EXCERPT.match(ln)]
    return " ".join(" ".join(lines).split())


_EXCERPT = re.compile(r"^\s*(\^+|\d+ \|.*)\s*$")  # "   ^^^" and "  12 | source line"
