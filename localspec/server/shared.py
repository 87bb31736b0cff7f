"""What every dialect renders alike: llama-server's `timings` object with the speculation figures
(OpenAI's, Ollama's, Anthropic's and /infill's answers carry it), and the embedding width check
(OpenAI's `dimensions`, Ollama's). A dialect's package imports these from here, never from another
dialect (tests/unit/test_layers.py)."""

from __future__ import annotations

from pydantic import BaseModel

from localspec.serving.errors import APIError
from localspec.serving.events import Response


class Timings(BaseModel):
    """llama.cpp's `timings` object (same keys, so tools that read llama-server read us), plus the
    speculation figures llama.cpp does not report."""

    prompt_n: int
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float
    draft_n: int
    draft_n_accepted: int
    cache_n: int = 0  # prompt tokens taken from a cached prefix (this slot's or another slot's)
    # ours
    speculative: bool
    acceptance_rate: float
    mean_accepted_len: float  # accepted draft tokens per verification round (bonus token excluded)
    tokens_per_round: float
    acceptance_by_pos: list[float]
    k_history: list[int]
    fell_back: bool
    seed: int
    # per draft source (draft, lookup, grammar): {"drafted": n, "accepted": n}
    draft_sources: dict[str, dict[str, int]] = {}


def timings(resp: Response) -> Timings:
    st = resp.stats
    prompt_s = st.prefill_ms / 1e3
    return Timings(
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
        cache_n=max(st.n_prompt_tokens - st.n_prefilled, 0),
        speculative=st.speculative,
        acceptance_rate=st.acceptance_rate,
        mean_accepted_len=st.mean_accepted_len,
        tokens_per_round=st.tokens_per_round,
        acceptance_by_pos=st.acceptance_by_pos,
        k_history=st.k_history,
        fell_back=st.fell_back,
        seed=resp.seed,
        draft_sources={
            k: {"drafted": v["drafted"], "accepted": v["accepted"]} for k, v in st.sources.items()
        },
    )


def check_dimensions(wanted: int | None, width: int, param: str) -> None:
    """A model's embedding has its own width; a shorter one would be another vector, so refused."""
    if wanted is not None and width and wanted != width:
        raise APIError(
            400,
            f"{param} {wanted}: this model's embeddings have {width} dimensions and cannot be shortened; "
            f"leave {param} out",
            param=param,
        )
