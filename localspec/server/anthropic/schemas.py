"""Anthropic's Messages request as pydantic models (responses are plain dicts: messages.py).

Every model is `Checked`: a field no model reads and no `IGNORED` lists is a 400 naming its path.
`cache_control` is accepted everywhere (prompt caching is automatic here: any shared prefix is
reused), and so are the fields Claude Code sends that do not change the answer (docs/apps.md)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Discriminator, Field, Tag

from localspec.server.fields import MAX_ITEMS, Checked

CACHED = frozenset({"cache_control"})


class Text(Checked):
    IGNORED: ClassVar[frozenset[str]] = CACHED | {"citations"}
    type: Literal["text"]
    text: str


class ImageSource(Checked):
    type: str  # base64 is read; url is refused (the server fetches nothing)
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class Image(Checked):
    IGNORED: ClassVar[frozenset[str]] = CACHED
    type: Literal["image"]
    source: ImageSource


class Other(Checked):
    """A block type this server does not read (image, document, server tools' blocks...): parse()
    refuses it by name."""

    model_config = Checked.model_config | {"extra": "ignore"}
    type: str


def _tag(block: Any, known: tuple[str, ...]) -> str:
    kind = block.get("type") if isinstance(block, dict) else getattr(block, "type", None)
    return kind if kind in known else "other"


ResultBlock = Annotated[
    Union[Annotated[Text, Tag("text")], Annotated[Other, Tag("other")]],
    Discriminator(lambda b: _tag(b, ("text",))),
]


class ToolResult(Checked):
    IGNORED: ClassVar[frozenset[str]] = CACHED
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ResultBlock] = ""
    is_error: bool = False


class ToolUse(Checked):
    IGNORED: ClassVar[frozenset[str]] = CACHED | {"caller"}
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class Thinking(Checked):
    IGNORED: ClassVar[frozenset[str]] = CACHED
    type: Literal["thinking"]
    thinking: str = ""
    signature: str = ""


class RedactedThinking(Checked):
    """Claude's encrypted reasoning from a conversation begun there: nothing a local model can read."""

    IGNORED: ClassVar[frozenset[str]] = CACHED
    type: Literal["redacted_thinking"]
    data: str = ""


_KNOWN = ("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking")
Block = Annotated[
    Union[
        Annotated[Text, Tag("text")], Annotated[Image, Tag("image")], Annotated[ToolUse, Tag("tool_use")],
        Annotated[ToolResult, Tag("tool_result")], Annotated[Thinking, Tag("thinking")],
        Annotated[RedactedThinking, Tag("redacted_thinking")], Annotated[Other, Tag("other")],
    ],
    Discriminator(lambda b: _tag(b, _KNOWN)),
]  # fmt: skip


class Tool(Checked):
    IGNORED: ClassVar[frozenset[str]] = CACHED | {"input_examples", "eager_input_streaming"}
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None  # "custom", or a server tool's ("web_search_20250305"): refused
    strict: bool | None = None
    defer_loading: bool = False  # left out of the prompt, as Anthropic leaves it out until searched


class ToolChoice(Checked):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class ThinkingConfig(Checked):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0)  # accepted, not enforced (docs/apps.md)
    display: Literal["summarized", "omitted", "updates"] | None = None


class JsonFormat(Checked):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class TurnConfig(Checked):
    effort: str | None = None  # one effort here: accepted, changes nothing (docs/apps.md)


class OutputConfig(TurnConfig):
    format: JsonFormat | None = None


class InputMessage(Checked):
    # "system" turns mid-conversation, with a per-turn output_config (Claude Code 2.1's environment)
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]
    output_config: TurnConfig | None = None


class CountBody(Checked):
    """POST /v1/messages/count_tokens: what the prompt is made of."""

    # fields that do not change the answer: client bookkeeping; context edits are not applied
    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {"metadata", "context_management", "service_tier", "speed", "inference_geo"}
    )
    model: str | None = None
    messages: list[InputMessage] = Field(min_length=1, max_length=MAX_ITEMS)
    system: str | list[Text] | None = None
    tools: list[Tool] | None = Field(None, max_length=MAX_ITEMS)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    output_format: JsonFormat | None = None  # the structured-outputs beta's older place for it


class MessagesBody(CountBody):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    def overrides(self) -> dict[str, Any]:
        """Settings overrides: max_tokens and what the client set (the model's defaults decide the rest)."""
        out: dict[str, Any] = {"max_tokens": self.max_tokens}
        for name in ("temperature", "top_p", "top_k"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.stop_sequences:
            out["stop"] = tuple(self.stop_sequences)
        return out
