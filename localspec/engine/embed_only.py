"""An embedding model served alone (nomic-embed-text, or any GGUF gguf/pooling.py calls one): its
weights and its embeddings context, both made at load; no generation context, no draft, no
rounds. It has no language-model head, so a request to generate is refused in one line. Every
decode still runs on the engine thread (the passes are commands there, as beside a pair: thread.py).

No memory plan is enforced here: the model and its one context are what the Embedder reserves at
load (its warm-up decode), and a load that does not fit is llama.cpp's error, said in one line."""

from __future__ import annotations

from typing import Callable

from localspec import llama
from localspec.config.settings import Settings
from localspec.engine.loader import LoadedPair
from localspec.errors import LocalspecError


def not_generative(target: llama.Model) -> LocalspecError:
    return LocalspecError(
        f"{target.path.name} is an embedding model ({target.meta('general.architecture')}): it answers "
        "/v1/embeddings and /api/embed, and generates no text; serve a chat model for that"
    )


def load(s: Settings, log: Callable[[str], None]) -> tuple[LoadedPair, llama.Embedder]:
    """The model and its embeddings context (--embed-ctx tokens, in one micro-batch: a non-causal
    model attends over the whole input at once, so an input never spans two)."""
    assert s.target is not None
    name = s.target.name
    given = [f for f, on in (("--draft", s.draft is not None), ("--mmproj", s.mmproj is not None)) if on]
    if given:
        raise LocalspecError(f"{name} is an embedding model: it generates nothing, so it takes no {given[0]}")
    if s.rpc_endpoints:
        raise LocalspecError(f"{name} is an embedding model: serve it without --rpc")
    if s.embed_ctx <= 0:  # `run` and `chat` (serve gives 512): it has nothing to do here
        raise LocalspecError(
            f"{name} is an embedding model: it generates no text, and makes embeddings with --embed-ctx "
            f"above 0 (`localspec serve --target {s.target}` serves them, 512 tokens by default)"
        )
    out = LoadedPair(s)
    try:
        out.target = out.stack.enter_context(llama.Model(s.target, n_gpu_layers=s.n_gpu_layers))
        embedder = out.stack.enter_context(embedder_for(out.target, s))
    except BaseException:
        out.close()
        raise
    log(
        f"embedding model {name}: {embedder.n_embd} dimensions, {embedder.pooling} pooling, inputs of up "
        f"to {embedder.n_ctx} tokens (--embed-ctx; trained for {out.target.n_ctx_train})"
    )
    if 0 < out.target.n_ctx_train < embedder.n_ctx:
        log(f"warning: inputs past {out.target.n_ctx_train} tokens are past what {name} was trained on")
    return out, embedder


def embedder_for(model: llama.Model, s: Settings) -> llama.Embedder:
    """The embeddings context on `model` that `s` asks for (any model's: a pair's target too)."""
    return llama.Embedder(
        model, n_ctx=s.embed_ctx, n_threads=s.n_threads, flash_attn=s.flash_attn, kv_type=s.kv_type
    )


class NoRounds:
    """The engine thread's scheduler where nothing is generated: no slots, never busy, so the
    thread only runs commands (the embeddings passes). A job that reaches it anyway fails."""

    busy = False
    free: list[int] = []

    def __init__(self, refusal: LocalspecError) -> None:
        self.refusal = refusal

    def add(self, job) -> None:  # noqa: ANN001 - a Schedulable
        job.fail(self.refusal)

    def step(self) -> None:
        pass

    def clear(self) -> None:
        pass

    def abort(self, error: BaseException) -> None:
        pass
