"""Engine results -> OpenAI objects. Stats are data; this is where the server formats them."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from pydantic import BaseModel

from localspec.engine import Response
from localspec.server import schemas as s

# extras we leave out of a chunk when they are empty; OpenAI's own keys are always sent (null included)
_OPTIONAL_EXTRAS = ("usage", "timings", "localspec")


def finish_reason(resp: Response) -> str:
    return "stop" if resp.finish_reason == "stop" else "length"  # a full context is a length stop too


def usage(resp: Response) -> s.Usage:
    n_prompt, n_gen = resp.stats.n_prompt_tokens, resp.stats.n_generated
    return s.Usage(prompt_tokens=n_prompt, completion_tokens=n_gen, total_tokens=n_prompt + n_gen)


def timings(resp: Response) -> s.Timings:
    st = resp.stats
    prompt_s = st.prefill_ms / 1e3
    return s.Timings(
        prompt_n=st.n_prompt_tokens,
        prompt_ms=st.prefill_ms,
        prompt_per_token_ms=st.prefill_ms / st.n_prompt_tokens if st.n_prompt_tokens else 0.0,
        prompt_per_second=st.n_prompt_tokens / prompt_s if prompt_s > 0 else 0.0,
        predicted_n=st.n_generated,
        predicted_ms=st.decode_ms,
        predicted_per_token_ms=1e3 / st.decode_tok_s if st.decode_tok_s else 0.0,
        predicted_per_second=st.decode_tok_s,
        draft_n=st.n_drafted,
        draft_n_accepted=st.n_accepted,
        speculative=st.speculative,
        acceptance_rate=st.acceptance_rate,
        mean_accepted_len=st.mean_accepted_len,
        tokens_per_round=st.tokens_per_round,
        acceptance_by_pos=st.acceptance_by_pos,
        k_history=st.k_history,
        fell_back=st.fell_back,
        seed=resp.seed,
    )


def dump(obj: BaseModel, *, usage_null: bool = False) -> str:
    """JSON for the wire. With stream_options.include_usage every chunk but the last carries
    "usage": null, as OpenAI's do; otherwise empty extras are left out."""
    data = obj.model_dump(mode="json")
    for key in _OPTIONAL_EXTRAS:
        if key in data and data[key] is None and not (key == "usage" and usage_null):
            del data[key]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Reply:
    """The identity every object of one response shares (id, created, model)."""

    model: str
    chat: bool
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]

    # -- whole responses ---------------------------------------------------------------------------
    def full(self, resp: Response) -> BaseModel:
        if self.chat:
            choice = s.ChatChoice(message=s.ChatMessage(content=resp.text), finish_reason=finish_reason(resp))
            return s.ChatCompletion(
                id=self.id, created=self.created, model=self.model, choices=[choice],
                usage=usage(resp), timings=timings(resp),
            )  # fmt: skip
        choice = s.CompletionChoice(text=resp.text, finish_reason=finish_reason(resp))
        return s.Completion(
            id=self.id, created=self.created, model=self.model, choices=[choice],
            usage=usage(resp), timings=timings(resp),
        )  # fmt: skip

    # -- stream pieces -------------------------------------------------------------------------------
    def piece(
        self,
        text: str | None,
        *,
        role: bool = False,
        finish: str | None = None,
        draft_marks: s.DraftMarks | None = None,
        resp: Response | None = None,
    ) -> BaseModel:
        """One streamed object: text, the opening role, or the closing finish_reason with timings."""
        tim = timings(resp) if resp is not None else None
        if self.chat:
            delta = s.Delta(role="assistant" if role else None, content=text)
            return s.ChatCompletionChunk(
                id=self.id, created=self.created, model=self.model,
                choices=[s.ChunkChoice(delta=delta, finish_reason=finish)],
                timings=tim, localspec=draft_marks,
            )  # fmt: skip
        return s.Completion(
            id=self.id, created=self.created, model=self.model,
            choices=[s.CompletionChoice(text=text or "", finish_reason=finish)],
            timings=tim, localspec=draft_marks,
        )  # fmt: skip

    def usage_piece(self, resp: Response) -> BaseModel:
        """The extra last chunk of stream_options.include_usage: empty choices, the usage."""
        cls = s.ChatCompletionChunk if self.chat else s.Completion
        return cls(id=self.id, created=self.created, model=self.model, choices=[], usage=usage(resp))
