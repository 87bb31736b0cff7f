"""llama-server's own endpoints that clients and tools use: POST /tokenize and /detokenize, over the
model facade (which bounds them and runs them off the event loop: serving/text_ops.py), and
its router's GET /models, POST /models/load and /models/unload; errors in
OpenAI's shape, as llama-server gives them."""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from localspec.server import offload
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.openai import errors
from localspec.server.openai import schemas as s
from localspec.server.openai.models import card

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
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
async def tokenize(body: TokenizeRequest, request: Request) -> Response:
    """{"tokens": [...]}, with pieces {"id", "piece"} when asked."""
    model = await models_of(request).ready(body.model)
    ids = await model.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
    pieces = await model.pieces(ids) if body.with_pieces else None
    return await _json({"tokens": ids if pieces is None else [_piece(t, b) for t, b in zip(ids, pieces)]})


def _piece(token: int, b: bytes) -> dict[str, Any]:
    try:
        piece: Any = b.decode("utf-8")
    except UnicodeDecodeError:  # part of a character: its bytes, as llama-server gives them
        piece = list(b)
    return {"id": token, "piece": piece}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> Response:
    return await _json(
        {"content": await (await models_of(request).ready(body.model)).detokenize(body.tokens)}
    )


async def _json(content: dict[str, Any]) -> Response:
    """A body of up to a million tokens, encoded off the event loop."""
    data = await anyio.to_thread.run_sync(lambda: json.dumps(content, ensure_ascii=False).encode())
    return Response(data, media_type="application/json")


@router.get("/models")
async def models(request: Request) -> s.ModelList:
    """The same list as /v1/models (llama-server's router serves it at both)."""
    return s.ModelList(data=[card(st) for st in models_of(request).status()])


@router.post("/models/load")
async def load(body: ModelName, request: Request) -> dict[str, Any]:
    """Load a model now (a model in error is retried); answers once it is loaded, or why not."""
    return await _changed(request, await models_of(request).load(body.model))


@router.post("/models/unload")
async def unload(body: ModelName, request: Request) -> dict[str, Any]:
    """Unload a model (what it is running is cancelled); answers once its memory is free."""
    return await _changed(request, await models_of(request).unload(body.model))


async def _changed(request: Request, model: Any) -> dict[str, Any]:
    st = next(st for st in models_of(request).status() if st.name == model.name)
    return {"success": True, "model": card(st).model_dump(mode="json")}
