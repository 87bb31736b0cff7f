"""The one internal request every dialect parses into: what to answer (chat messages, or a raw
prompt), how (`overrides`: Settings fields by name - sampling, stop, logprobs, the constraint,
speculation), the tools the answer may call, and how many choices. The overrides are checked once,
by `Settings` itself, when the model builds the request's settings (LocalModel.submit)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, NoReturn, Sequence

from localspec.config.settings import REQUEST, Settings, setting_field
from localspec.constrain.depth import depth_error
from localspec.errors import LocalspecError
from localspec.serving.errors import APIError, from_localspec
from localspec.serving.fim import Fill

TOOL_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class ToolCall:
    """A call in the conversation's history (an assistant turn's)."""

    id: str
    name: str
    arguments: str = "{}"  # JSON text


@dataclass(frozen=True)
class Image:
    """An image part as it was sent (encoded bytes: decoded later, within the server's limits), `at`
    a character offset into its message's content: where it sits among the text parts."""

    at: int
    data: bytes


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str = ""  # text (a message's text parts joined)
    images: tuple[Image, ...] = ()  # its image parts, each at its place in the text
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # a tool result: the call it answers
    name: str | None = None  # a tool result: the function's name
    reasoning: str = ""  # an assistant turn's thinking, for templates that read reasoning_content


def joined(parts: Sequence[str | bytes]) -> tuple[str, tuple[Image, ...]]:
    """A message's parts in order - text (str) and images (their bytes) - as its content and images.
    Text parts are joined by a newline, none beside an image (llama.cpp's and vLLM's join: Codex's
    `</skills_instructions>` and `<permissions instructions>` are two parts of one message)."""
    text: list[str] = []
    images: list[Image] = []
    at, after_text = 0, False
    for p in parts:
        if isinstance(p, bytes):
            images.append(Image(at, p))
            after_text = False
            continue
        if after_text and at:
            text.append("\n")
            at += 1
        text.append(p)
        at += len(p)
        after_text = True
    return "".join(text), tuple(images)


@dataclass(frozen=True)
class Tool:
    """A function the answer may call; `parameters` is its arguments' JSON schema."""

    name: str
    description: str | None = None
    parameters: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        too_deep = depth_error(self.parameters, f"the parameters of tool {self.name!r}")
        if too_deep:
            raise APIError(400, too_deep, param="tools")


@dataclass(frozen=True)
class Request:
    messages: tuple[Message, ...] = ()
    prompt: str | tuple[int, ...] | None = None  # a raw prompt (no template): text or token ids
    fill: Fill | None = None  # fill-in-the-middle: the prompt is laid out from it (serving/fim.py)
    special: bool = False  # a raw prompt's text may hold special tokens (Ollama's raw FIM prompts)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"  # auto | none | required
    forced_tool: str | None = None  # the function the answer must call (with tool_choice required)
    parallel_tool_calls: bool = True
    reasoning: bool | None = None  # think first (the template's enable_thinking); None: its default
    template_vars: Mapping[str, Any] = field(default_factory=dict)  # more chat template variables
    n: int = 1
    stream: bool = False
    progress: bool = False  # stream its prompt's evaluation as Progress events (return_progress)
    model: str | None = None
    clamp_max_tokens: bool = False  # max_tokens past what the context holds means "what fits"
    # router mode: seconds the model stays loaded after this request (Ollama's keep_alive); 0
    # unloads it once idle, negative keeps it until evicted; None: the server's --idle-unload
    keep_alive: float | None = None

    def __post_init__(self) -> None:
        if self.tool_choice not in TOOL_CHOICES:
            raise ValueError(f"tool_choice is one of {TOOL_CHOICES}, got {self.tool_choice!r}")

    @property
    def chat(self) -> bool:
        return self.prompt is None and self.fill is None


def settings_for(base: Settings, req: Request) -> Settings:
    """The request's settings: the one place its fields are checked (by Settings itself, which
    refuses a field outside a request's scope)."""
    try:
        return base.override(REQUEST, **req.overrides) if req.overrides else base
    except LocalspecError as e:
        raise from_localspec(e, "messages" if req.chat else "prompt") from None
    except TypeError as e:  # a field Settings does not have: a dialect's bug, said plainly
        raise APIError(400, str(e)) from None


# the constraint, as overrides: every dialect's JSON mode and schema end up as these
def json_schema(schema: Any, *, strict: bool | None = None, param: str = "json_schema") -> dict[str, Any]:
    """The answer is JSON following `schema`; strict: refuse keywords that cannot be enforced
    (None: the setting's default, on). One nested too deep is a 400 before anything recurses."""
    too_deep = depth_error(schema)
    if too_deep:
        raise APIError(400, too_deep, param=param, code="schema_too_deep")
    out: dict[str, Any] = {"json_schema": json.dumps(schema)}
    if strict is not None:
        out["json_strict"] = strict
    return out


def json_object() -> dict[str, Any]:
    """The answer is any JSON object."""
    return json_schema({"type": "object"}, strict=False)


def until_context_end() -> dict[str, Any]:
    """The limit of a request whose API reads no limit as "until the end of text or of the context"
    (OpenAI's Responses, as llama-server's n_predict -1): the most Settings takes, which
    `clamp_max_tokens` lowers to the room the prompt leaves."""
    return {"max_tokens": setting_field("max_tokens").metadata["le"]}


def grammar(text: str) -> dict[str, Any]:
    """The answer follows a GBNF or Lark grammar."""
    return {"grammar": text}


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive(value: Any, param: str = "keep_alive") -> float | None:
    """Ollama's keep_alive in seconds: a number of seconds, or a Go duration ("5m", "1h30m",
    "-1", "0"); negative: until evicted. None stays None (the server's --idle-unload)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float):  # JSON's NaN and Infinity parse as floats: no duration
        return value if math.isfinite(value) else _not_a_duration(value, param)
    text = value.strip() if isinstance(value, str) else ""
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None and math.isfinite(seconds):  # not "nan", "inf", "Infinity"
        return seconds
    sign, body = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text.lstrip("+"))
    parts = _DURATION.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        _not_a_duration(value, param)
    return sign * sum(float(n) * _UNIT_S[u] for n, u in parts)


def _not_a_duration(value: Any, param: str) -> NoReturn:
    raise APIError(400, f"{param} is seconds or a duration like 5m, 1h30m or -1; got {value!r}", param=param)
