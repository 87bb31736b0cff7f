"""What a request gives back: chunks as they are decoded, the last one carrying the Response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from localspec.decode.stats import Stats


@dataclass(frozen=True)
class Response:
    text: str
    tokens: list[int]
    finish_reason: str  # stop (EOG or stop string) | length (max_tokens) | context (n_ctx full)
    stats: Stats
    prompt_tokens: list[int]
    seed: int
    # with Settings.logprobs: per emitted token, (log-probability, ((token, log-probability), ...) best first)
    logprobs: list[tuple[float, tuple[tuple[int, float], ...]]] | None = None
    stop_string: str | None = None  # the stop string that ended the text, if one did

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tokens": self.tokens,
            "finish_reason": self.finish_reason,
            "n_prompt_tokens": self.stats.n_prompt_tokens,
            "n_generated": self.stats.n_generated,
            "decode_tok_s": self.stats.decode_tok_s,
            "prefill_ms": self.stats.prefill_ms,
            "seed": self.seed,
            "stats": self.stats.to_dict(),
        }


@dataclass(frozen=True)
class Chunk:
    text: str
    tokens: list[int] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)  # per token: a draft token the target accepted
    response: Response | None = None  # set on the last chunk only
    logprobs: list[tuple[float, tuple[tuple[int, float], ...]]] = field(
        default_factory=list
    )  # per token, when asked


@dataclass(frozen=True)
class Progress:
    """A prompt being evaluated, as llama-server's `prompt_progress` says it: `processed` of its
    `total` tokens are in the cache, `cache` of them reused from an earlier request's, `time_ms`
    since it was admitted. Posted after admission and after each round of its prefill."""

    total: int
    cache: int
    processed: int
    time_ms: int
