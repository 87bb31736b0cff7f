"""Ollama's embeddings: POST /api/embed (a text or texts; each cut to the model's embeddings context
unless `truncate` is false, Ollama's default) and the older /api/embeddings (one prompt, refused when
too long, where Ollama's runner fails). Vectors
are of unit length on both (Ollama's older endpoint gives them unscaled: the direction is the same).
An empty input only says the model is loaded."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, Request

from localspec.server import offload
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.fields import refuse_unsupported
from localspec.server.ollama import errors
from localspec.server.ollama import schemas as s
from localspec.server.ollama.chat import model_name
from localspec.server.shared import check_dimensions
from localspec.serving.errors import APIError

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response
PREFIX = "/api/"


@router.post("/api/embed")
async def embed(body: s.EmbedRequest, request: Request) -> dict[str, Any]:
    started = time.monotonic()
    inputs = await offload.run(parse, body)
    model = models_of(request).get(model_name(body.model))
    check_dimensions(body.dimensions, model.card.n_embd, "dimensions")
    if not inputs:
        return {"model": body.model, "embeddings": []}
    done = await model.embed(inputs, truncate=body.truncate, is_disconnected=request.is_disconnected)
    return {
        "model": body.model,
        "embeddings": done.vectors,
        "total_duration": int((time.monotonic() - started) * 1e9),
        "load_duration": 0,
        "prompt_eval_count": done.total_tokens,
    }


@router.post("/api/embeddings")
async def embeddings(body: s.EmbeddingsRequest, request: Request) -> dict[str, Any]:
    refuse_unsupported(body)
    model = models_of(request).get(model_name(body.model))
    if not body.prompt:
        return {"embedding": []}
    return {
        "embedding": (await model.embed([body.prompt], is_disconnected=request.is_disconnected)).vectors[0]
    }


def parse(body: s.EmbedRequest) -> list[str]:
    """The texts to embed: `input` as a string or a list of them ("" or none: none)."""
    refuse_unsupported(body)
    x = body.input
    texts = [x] if isinstance(x, str) else list(x or [])
    if texts == [""]:
        return []
    bad = next((i for i, t in enumerate(texts) if not t), None)
    if bad is not None:
        raise APIError(400, f"input.{bad} is empty: there is nothing to embed", param=f"input.{bad}")
    return texts
