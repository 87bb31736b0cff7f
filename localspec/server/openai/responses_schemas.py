"""OpenAI's Responses API request as pydantic models. The top level is checked (an unknown field is
a 400 that names it); input items, their parts and tools keep only what is read, because clients
send back the items a response gave them (ids, statuses, annotations) and those change nothing."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from localspec.server.fields import MAX_ITEMS
from localspec.server.openai.schemas import LocalspecOptions, Overrides

# sent by Codex, the Agents SDK and the openai SDK, and without effect on the answer here
IGNORED_FIELDS = frozenset(
    {"store", "prompt_cache_key", "prompt_cache_retention", "client_metadata", "metadata", "user",
     "safety_identifier", "service_tier", "stream_options"}
)  # fmt: skip


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Part(_Loose):
    """A content part: input_text / output_text (text), refusal, reasoning_text, summary_text,
    input_image (a data URL in image_url; a file_id or a remote URL is refused), or a file (refused)."""

    type: str
    text: str | None = None
    refusal: str | None = None
    image_url: str | None = None


class Item(_Loose):
    """One input item. A message may come without `type`; the other kinds carry their own fields."""

    type: str = "message"
    role: str | None = None
    content: str | list[Part] | None = None
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    arguments: str | None = None
    input: str | None = None  # a custom tool call's text
    output: str | list[Part] | None = None
    summary: list[Part] | None = None


class ToolIn(_Loose):
    """A tool: `function`, `custom` (free text in), `namespace` (a group of those), or a built-in
    this server cannot run (web_search, file_search, ...)."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    tools: list[ToolIn] | None = None  # a namespace's


class ToolChoiceObject(_Loose):
    """{"type": "function" | "custom", "name"}, {"type": "allowed_tools", "mode", "tools"}, or a
    built-in's {"type": "web_search"} (refused: it cannot run here)."""

    type: str
    name: str | None = None
    mode: Literal["auto", "required"] | None = None
    tools: list[dict[str, Any]] | None = None


_ITEMS = TypeAdapter(list[Item])


class TextFormat(_Loose):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(_Loose):
    format: TextFormat | None = None
    verbosity: str | None = None  # a hint to OpenAI's models; no local model has the knob


class ReasoningConfig(_Loose):
    effort: str | None = None  # "none": do not think; any other: think (where the template can)
    summary: str | None = None  # no summaries are written: the reasoning itself is returned
    generate_summary: str | None = None


class ResponsesRequest(Overrides):
    IGNORED: ClassVar[frozenset[str]] = IGNORED_FIELDS
    model: str | None = None
    input: str | Annotated[list[Item], Field(max_length=MAX_ITEMS)]
    instructions: str | None = None
    tools: list[ToolIn] | None = Field(None, max_length=MAX_ITEMS)
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceObject | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = None
    include: list[str] | None = None
    stream: bool = False
    previous_response_id: str | None = None
    background: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None
    return_progress: bool = False  # llama-server's: response.in_progress events carry prompt_progress
    localspec: LocalspecOptions | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _input_shape(cls, v: Any) -> Any:
        # one message naming the item (pydantic's names the union's first branch: "input.str: ...")
        if isinstance(v, str):
            return v
        if not isinstance(v, list):
            raise PydanticCustomError("input_shape", "must be a string or a list of input items")
        try:
            return _ITEMS.validate_python(v)
        except ValidationError as e:
            first = e.errors()[0]
            at = ".".join(str(x) for x in first["loc"] if not str(x).startswith(("str", "list[")))
            raise PydanticCustomError("input_item", f"item {at}: {first['msg']}") from None

    @property
    def mark_drafts(self) -> bool:
        return bool(self.localspec and self.localspec.mark_drafts)

    @property
    def want_logprobs(self) -> bool:
        return "message.output_text.logprobs" in (self.include or ()) or bool(self.top_logprobs)
