"""OpenAI's model list, GET /v1/models: every served model's card, with vLLM's `max_model_len` and
llama-server's `meta` (the context a request may use); Anthropic's shape for Anthropic's clients."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from localspec.server.anthropic import models as anthropic
from localspec.server.auth import require_key
from localspec.server.openai import errors
from localspec.server.openai import schemas as s

router = APIRouter(dependencies=[Depends(require_key)])
error_response = errors.error_response


@router.get("/v1/models")
async def models(request: Request) -> Any:
    cards = [m.card for m in request.app.state.models]
    if anthropic.HEADER in request.headers:  # one path, two dialects: the header tells them apart
        return anthropic.listing(cards)
    return s.ModelList(data=[
        s.ModelCard(
            id=c.name, created=c.created, max_model_len=c.n_ctx,
            meta=s.ModelMeta(n_ctx=c.n_ctx, n_ctx_train=c.n_ctx_train, n_vocab=c.n_vocab, n_params=c.n_params, size=c.size),
        )  # fmt: skip
        for c in cards
    ])  # fmt: skip
