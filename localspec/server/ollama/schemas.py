"""Ollama's requests as pydantic models (its api/types.go), and `options` mapped onto our Settings.

Unknown fields are a 400 naming them (server/fields.py); each model's IGNORED lists what Ollama's
clients send that does not change the answer: the runner's load options (num_gpu, num_thread,
...), `truncate` and `shift` (we never cut a prompt: one that does not fit is a 400); `keep_alive`
is read (a router unloads by it). Options that would change the answer and that we do not have (mirostat,
typical_p, tfs_z) are refused unless they are set to their neutral value."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from localspec.server.fields import MAX_ITEMS, Checked
from localspec.serving import request as internal
from localspec.serving.errors import APIError

_IGNORED_TOP = frozenset({"truncate", "shift"})
# Ollama option -> Settings field, where the meaning is the same
SAME = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "seed": "seed",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "num_predict": "max_tokens",
    "draft_num_predict": "draft_max",  # Ollama's speculative decoding: tokens drafted per round
}
# options that change the answer, unsupported: allowed only at the value that changes nothing
NEUTRAL = {"typical_p": 1.0, "tfs_z": 1.0, "mirostat": 0, "penalize_newline": True}


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Options(Checked):
    """`options`: sampling onto Settings; the runner's load options are ignored (the model is loaded)."""

    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {"num_batch", "num_gpu", "main_gpu", "low_vram", "numa", "num_thread", "use_mmap", "use_mlock",
         "f16_kv", "vocab_only", "logits_all", "embedding_only", "num_keep", "mirostat_tau", "mirostat_eta"}
    )  # fmt: skip
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    num_predict: int | None = None
    draft_num_predict: int | None = None
    stop: str | list[str] | None = None
    num_ctx: int | None = None
    typical_p: float | None = None
    tfs_z: float | None = None
    mirostat: int | None = None
    penalize_newline: bool | None = None

    def check_context(self, n_ctx: int) -> None:
        """num_ctx cannot grow the context the server loaded (`n_ctx` tokens a request)."""
        if self.num_ctx is not None and self.num_ctx > n_ctx:
            raise APIError(
                400,
                f"options.num_ctx {self.num_ctx} is more than this server's context ({n_ctx} tokens a "
                "request); lower it, or restart localspec serve with a larger --n-ctx",
                param="options.num_ctx",
            )

    def overrides(self) -> dict[str, Any]:
        """Settings overrides."""
        for name, neutral in NEUTRAL.items():
            v = getattr(self, name)
            if v is not None and v != neutral:
                raise APIError(
                    400, f"options.{name} {v!r} is not supported here (leave it out, or {neutral!r})",
                    param=f"options.{name}",
                )  # fmt: skip
        out = {
            ours: getattr(self, theirs) for theirs, ours in SAME.items() if getattr(self, theirs) is not None
        }
        if out.get("max_tokens", 0) < 0:  # -1 (until the end) and -2 (fill the context): our --max-tokens
            del out["max_tokens"]
        if out.get("seed", 0) < 0:  # -1: a random seed
            del out["seed"]
        if "draft_max" in out:
            out["draft_max"] = str(out["draft_max"])
        if self.stop is not None:
            out["stop"] = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        return out


class ToolCallFunction(_Base):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class ToolCall(_Base):
    id: str | None = None
    function: ToolCallFunction


class Message(Checked):
    IGNORED: ClassVar[frozenset[str]] = frozenset({"index"})
    role: str
    content: str = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = Field(None, max_length=MAX_ITEMS)
    tool_name: str | None = None
    tool_call_id: str | None = None


class ToolFunction(_Base):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Base):
    type: str = "function"
    function: ToolFunction


class GenerationBase(Checked):
    """What /api/chat and /api/generate share."""

    IGNORED: ClassVar[frozenset[str]] = _IGNORED_TOP
    model: str = Field(min_length=1)
    stream: bool = True  # Ollama streams unless told not to
    format: str | dict[str, Any] | None = None
    options: Options | None = None
    think: bool | str | None = None
    keep_alive: float | str | None = None  # router mode: how long the model stays loaded once idle
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def overrides(self) -> dict[str, Any]:
        out = self.options.overrides() if self.options else {}
        if self.format == "json":
            out.update(internal.json_object())
        elif isinstance(self.format, dict):
            out.update(internal.json_schema(self.format, param="format"))
        elif self.format not in (None, ""):
            raise APIError(400, f"format is 'json' or a JSON schema (got {self.format!r})", param="format")
        if self.logprobs:
            out["logprobs"] = True
            out["top_logprobs"] = self.top_logprobs or 0
        return out

    def reasoning(self) -> tuple[bool | None, dict[str, Any]]:
        """`think`: on or off; a level (low, medium, high) is on, and the template's reasoning_effort."""
        if isinstance(self.think, str):
            if self.think not in ("low", "medium", "high", "max"):
                raise APIError(
                    400, f"think is true, false, or low, medium, high (got {self.think!r})", param="think"
                )
            return True, {"reasoning_effort": self.think}
        return self.think, {}


class ChatRequest(GenerationBase):
    messages: list[Message] = Field(default_factory=list, max_length=MAX_ITEMS)
    tools: list[Tool] | None = Field(None, max_length=MAX_ITEMS)


class GenerateRequest(GenerationBase):
    prompt: str = ""
    system: str = ""
    raw: bool = False
    suffix: str = ""
    template: str = ""
    context: list[int] | None = None
    images: list[str] | None = None


class EmbedRequest(Checked):
    IGNORED: ClassVar[frozenset[str]] = frozenset({"keep_alive"})
    model: str = Field(min_length=1)
    input: str | list[str] | None = None
    truncate: bool = True  # Ollama cuts an input to the context unless told not to
    dimensions: int | None = None
    options: Options | None = None  # accepted; nothing in it changes an embedding


class EmbeddingsRequest(Checked):
    """The older /api/embeddings: one prompt."""

    IGNORED: ClassVar[frozenset[str]] = frozenset({"keep_alive"})
    model: str = Field(min_length=1)
    prompt: str = ""
    options: Options | None = None


class ShowRequest(Checked):
    IGNORED: ClassVar[frozenset[str]] = frozenset({"system", "template", "options"})  # deprecated, unused
    model: str | None = None
    name: str | None = None  # the older name of `model`
    verbose: bool = False
