"""OpenAI's embeddings, POST /v1/embeddings: a text, texts, token ids or lists of them in; one
unit-length vector each out, as floats or as base64 of their float32 bytes (what the `openai`
client asks for by default), with usage. The served model embeds them (Model.embed); an input
longer than its embeddings context is refused, as OpenAI refuses one. A model name the server does
not know is served by its one model: RAG tools send their own default (text-embedding-3-small)."""

from __future__ import annotations

import base64
from typing import Any, Sequence

import numpy as np
from fastapi import APIRouter, Depends, Request

from localspec.server import offload
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.fields import refuse_unsupported
from localspec.server.openai import errors
from localspec.server.openai import schemas as s
from localspec.server.shared import check_dimensions
from localspec.serving import Embedded
from localspec.serving.errors import APIError

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response


@router.post("/v1/embeddings")
async def embeddings(body: s.EmbeddingRequest, request: Request) -> dict[str, Any]:
    inputs = await offload.run(parse, body)
    model = models_of(request).get(body.model)
    check_dimensions(body.dimensions, model.card.n_embd, "dimensions")
    done = await model.embed(inputs, is_disconnected=request.is_disconnected)
    return render(done, body.encoding_format, model.name)


def parse(body: s.EmbeddingRequest) -> list[str | list[int]]:
    """The inputs, one per vector: a string or a list of token ids each."""
    refuse_unsupported(body)
    x = body.input
    if isinstance(x, str) or (x and isinstance(x[0], int)):
        return [x]  # type: ignore[list-item]
    if not x:
        raise APIError(
            400, "input is empty: give a string, strings, token ids or lists of them", param="input"
        )
    return list(x)


def render(done: Embedded, encoding: str, model: str) -> dict[str, Any]:
    data = [s.EmbeddingData(index=i, embedding=_encoded(v, encoding)) for i, v in enumerate(done.vectors)]
    usage = s.EmbeddingUsage(prompt_tokens=done.total_tokens, total_tokens=done.total_tokens)
    return s.EmbeddingList(data=data, model=model, usage=usage).model_dump(mode="json")


def _encoded(v: Sequence[float], encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
    return list(v)
