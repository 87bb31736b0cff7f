"""The OpenAI wire format as pydantic models: requests in, responses out.

Sampling and speculation request fields are generated from the `Settings` fields of those groups, so
a request field means what the flag and TOML key of the same name mean (top_k, min_p, draft_max, ...).
"""

from __future__ import annotations

import types
import typing
from typing import Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from localspec.config.settings import Settings, setting_fields
from localspec.server.fields import MAX_ITEMS, Checked
from localspec.server.shared import Timings
from localspec.serving import request as internal


def _optional(name: str) -> Any:
    base = typing.get_type_hints(Settings)[name]
    if typing.get_origin(base) in (Union, types.UnionType):  # X | None -> X
        base = next(a for a in typing.get_args(base) if a is not type(None))
    if typing.get_origin(base) is tuple:
        return Union[str, list[str], None]
    if name == "draft_max":  # "auto" or a number
        return Union[int, str, None]
    return Union[base, None]


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore")  # inside messages and tools: keys we need not read


# request fields that do not change the answer, accepted and not used (any other unknown field is a
# 400 that names it: a client must not get an answer it did not ask for without being told)
IGNORED_FIELDS = frozenset(
    {"user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key", "cache_prompt",
     "prediction", "modalities", "stream_options", "id_slot", "timings_per_token"}
)  # fmt: skip


class StreamOptions(_Base):
    include_usage: bool = False


class LocalspecOptions(BaseModel):
    """The extra request field `localspec`, ours alone."""

    model_config = ConfigDict(extra="forbid")
    mark_drafts: bool = Field(False, description="Mark streamed text that came from accepted drafts.")


class JsonSchemaFormat(_Base):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool = Field(True, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`: text, json_object (any JSON object) or json_schema; llama-server's
    `schema` beside `type` is read too."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema")

    @model_validator(mode="after")
    def _has_schema(self) -> "ResponseFormat":
        if self.type == "json_schema" and self.json_schema is None and self.schema_ is None:
            raise ValueError("type json_schema needs a json_schema object holding the schema")
        return self

    def constraint(self) -> dict[str, Any]:
        """The Settings overrides this format asks for."""
        if self.type == "text":
            return {}
        if self.type == "json_schema" and self.json_schema is not None:
            return internal.json_schema(
                self.json_schema.schema_,
                strict=bool(self.json_schema.strict),
                param="response_format.json_schema.schema",
            )
        if self.schema_ is not None:
            return internal.json_schema(self.schema_, strict=False, param="response_format.schema")
        return internal.json_object()


def _request_type(name: str) -> Any:
    if name == "logit_bias":  # OpenAI's shape: {"token id": bias}
        return Union[dict[str, float], None]
    return _optional(name)


_GENERATED = [f for g in ("sampling", "spec", "output") for f in setting_fields(g) if f.name != "logprobs"]


_overrides = create_model(
    "_Overrides",
    __base__=Checked,
    **{f.name: (_request_type(f.name), Field(None, description=f.metadata["help"])) for f in _GENERATED},
)


class Overrides(_overrides):  # type: ignore[misc, valid-type]
    """The request fields generated from Settings (every OpenAI dialect reads them)."""

    def setting_overrides(self) -> dict[str, Any]:
        """Settings overrides: every generated field the client set."""
        out: dict[str, Any] = {}
        for f in _GENERATED:
            v = getattr(self, f.name, None)
            if v is None:
                continue
            if f.name == "stop":
                v = (v,) if isinstance(v, str) else tuple(v)
            elif f.name == "draft_max":
                v = str(v)
            out[f.name] = v
        return out


class RequestBase(Overrides):
    IGNORED: ClassVar[frozenset[str]] = IGNORED_FIELDS
    model: str | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    # llama-server's: a stream says how far its prompt's evaluation has come (prompt_progress)
    return_progress: bool = False
    localspec: LocalspecOptions | None = None
    # router mode: how long the model stays loaded once idle (Ollama's keep_alive: seconds or "5m")
    keep_alive: float | str | None = None
    # constrained output: OpenAI's response_format; llama-server's grammar (GBNF or Lark) and json_schema
    response_format: ResponseFormat | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | bool | None = None

    def overrides(self) -> dict[str, Any]:
        """Settings overrides for Engine.submit: the generated fields and the constraint."""
        out = self.setting_overrides()
        if self.response_format is not None:
            out.update(self.response_format.constraint())
        if self.json_schema is not None:
            out.update(internal.json_schema(self.json_schema))
        if self.grammar is not None:
            out.update(internal.grammar(self.grammar))
        return out

    @property
    def mark_drafts(self) -> bool:
        return bool(self.localspec and self.localspec.mark_drafts)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ImageURL(_Base):
    url: str
    detail: str | None = None  # auto | low | high: the projector decides the resolution here


class ContentPart(_Base):
    type: str
    text: str | None = None
    image_url: ImageURL | None = None  # type "image_url": a data URL (remote URLs are refused)


class FunctionCall(_Base):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(_Base):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Base):
    role: str
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallIn] | None = Field(None, max_length=MAX_ITEMS)
    tool_call_id: str | None = None
    name: str | None = None


class FunctionDef(_Base):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Base):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Base):
    name: str


class NamedToolChoice(_Base):
    type: Literal["function"]
    function: NamedFunction


class ChatRequest(RequestBase):
    messages: list[Message] = Field(min_length=1, max_length=MAX_ITEMS)
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    tools: list[Tool] | None = Field(None, max_length=MAX_ITEMS)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: dict[str, Any] | None = None

    def overrides(self) -> dict[str, Any]:
        out = super().overrides()
        if self.max_completion_tokens is not None:  # the newer name wins, as OpenAI documents
            out["max_tokens"] = self.max_completion_tokens
        if self.logprobs is not None:
            out["logprobs"] = self.logprobs
        return out


class CompletionRequest(RequestBase):
    prompt: str | list[str] | list[int]
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(None, ge=0, le=5)  # completions: how many alternatives, 0 = just the token's

    def overrides(self) -> dict[str, Any]:
        out = super().overrides()
        if self.logprobs is not None:
            out["logprobs"], out["top_logprobs"] = True, self.logprobs
        return out


# -- responses ------------------------------------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]
    refusal: None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class FunctionOut(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionOut


class ChatMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None  # llama-server's and DeepSeek's name; left out when empty
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    timings: Timings


class FunctionDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionDelta


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class DraftMarks(BaseModel):
    """Which of this chunk's tokens were accepted draft tokens (request `localspec.mark_drafts`)."""

    from_draft: list[bool]
    all_draft: bool  # the chunk's whole text came from accepted drafts: colour it


class PromptProgress(BaseModel):
    """llama-server's `prompt_progress` (request `return_progress`): `processed` of `total` prompt
    tokens evaluated, `cache` of them reused; the time spent on `processed - cache` is `time_ms`."""

    total: int
    cache: int
    processed: int
    time_ms: int


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    timings: Timings | None = None
    localspec: DraftMarks | None = None
    prompt_progress: PromptProgress | None = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    timings: Timings | None = None
    localspec: DraftMarks | None = None
    prompt_progress: PromptProgress | None = None


class ModelMeta(BaseModel):
    """llama-server's `meta` (the keys clients read)."""

    n_ctx: int
    n_ctx_train: int
    n_vocab: int
    n_params: int
    size: int


class ModelStatus(BaseModel):
    """llama-server's router `status` (value: loaded, loading, unloaded or error; ours also
    unloading), with why it failed, how long its load took and when it unloads if left idle."""

    value: str
    failed: bool | None = None
    error: str | None = None
    load_s: float | None = None
    loaded_at: int | None = None
    expires_at: int | None = None
    pid: int | None = None


class ServedFiles(BaseModel):
    """What is served under the name: a pair folder or one GGUF, its files and memory plan."""

    kind: str  # pair | gguf
    path: str
    target: str
    draft: str | None  # the draft's file, "mtp" (the target's own head), or None (lookup drafts)
    parallel: int
    memory: dict[str, int] | None = None  # cpu_bytes, device_bytes


class Architecture(BaseModel):
    """llama-server's router says what a model takes and gives (Zed and pi read it)."""

    input_modalities: list[str] = ["text"]
    output_modalities: list[str] = ["text"]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "localspec"
    max_model_len: int  # vLLM's name for the context a request may use
    context_length: int  # OpenRouter's name for it (OpenAI-compatible clients read either)
    max_context_length: int  # LM Studio's (its /api/v0/models): what the model can take
    loaded_context_length: int  # and LM Studio's for what it was loaded with; here both are one slot's
    capabilities: list[str]  # Ollama's words: completion, tools, insert, vision, thinking | embedding
    meta: ModelMeta
    status: ModelStatus
    architecture: Architecture = Architecture()
    localspec: ServedFiles


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# -- embeddings ------------------------------------------------------------------------------------
class EmbeddingRequest(Checked):
    IGNORED: ClassVar[frozenset[str]] = frozenset({"user"})
    model: str | None = None
    # a text, texts, token ids, or lists of token ids (pydantic picks the first that fits exactly)
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # base64: the float32 values' little-endian bytes


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage
