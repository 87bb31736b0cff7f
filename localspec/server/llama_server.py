"""llama-server's own endpoints that clients and tools use: POST /tokenize and /detokenize, over the
model facade (which bounds them and runs them off the event loop: serving/text_ops.py); errors in
OpenAI's shape, as llama-server gives them."""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from localspec.server.auth import require_key
from localspec.server.openai import errors

router = APIRouter(dependencies=[Depends(require_key)])
error_response = errors.error_response


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    tokens: list[int]


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> Response:
    """{"tokens": [...]}, with pieces {"id", "piece"} when asked."""
    model = request.app.state.models.get(None)
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
    return await _json({"content": await request.app.state.models.get(None).detokenize(body.tokens)})


async def _json(content: dict[str, Any]) -> Response:
    """A body of up to a million tokens, encoded off the event loop."""
    data = await anyio.to_thread.run_sync(lambda: json.dumps(content, ensure_ascii=False).encode())
    return Response(data, media_type="application/json")
