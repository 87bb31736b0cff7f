"""llama-server's own endpoints that clients and tools use: POST /tokenize and /detokenize, over the
model facade; errors in OpenAI's shape, as llama-server gives them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
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
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    """{"tokens": [...]}, with pieces {"id", "piece"} when asked."""
    model = request.app.state.models.get(None)
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
    return {"content": request.app.state.models.get(None).detokenize(body.tokens)}
