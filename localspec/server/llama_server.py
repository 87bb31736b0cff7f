"""llama-server's own endpoints that clients and tools use: POST /tokenize and /detokenize, over the
model facade, and its router's GET /models, POST /models/load and /models/unload; errors in
OpenAI's shape, as llama-server gives them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict

from localspec.server.auth import require_key
from localspec.server.openai import errors
from localspec.server.openai import schemas as s
from localspec.server.openai.models import card

router = APIRouter(dependencies=[Depends(require_key)])
error_response = errors.error_response


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None  # a router's model (loaded if it is not); one model: that one
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class ModelName(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[int]


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    """{"tokens": [...]}, with pieces {"id", "piece"} when asked."""
    model = await request.app.state.models.ready(body.model)
    ids = model.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
    if not body.with_pieces:
        return {"tokens": ids}
    out = []
    for t in ids:
        b = model.token_bytes(t, special=True)
        try:
            piece: Any = b.decode("utf-8")
        except UnicodeDecodeError:  # part of a character: its bytes, as llama-server gives them
            piece = list(b)
        out.append({"id": t, "piece": piece})
    return {"tokens": out}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    model = await request.app.state.models.ready(body.model)
    return {"content": model.detokenize(body.tokens)}


@router.get("/models")
async def models(request: Request) -> s.ModelList:
    """The same list as /v1/models (llama-server's router serves it at both)."""
    return s.ModelList(data=[card(st) for st in request.app.state.models.status()])


@router.post("/models/load")
async def load(body: ModelName, request: Request) -> dict[str, Any]:
    """Load a model now (a model in error is retried); answers once it is loaded, or why not."""
    return await _changed(request, await request.app.state.models.load(body.model))


@router.post("/models/unload")
async def unload(body: ModelName, request: Request) -> dict[str, Any]:
    """Unload a model (what it is running is cancelled); answers once its memory is free."""
    return await _changed(request, await request.app.state.models.unload(body.model))


async def _changed(request: Request, model: Any) -> dict[str, Any]:
    st = next(st for st in request.app.state.models.status() if st.name == model.name)
    return {"success": True, "model": card(st).model_dump(mode="json")}
