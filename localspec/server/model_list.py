"""GET /v1/models: one path, two dialects, told apart by the header every Anthropic client sends
(its SDKs', Claude Code's): Anthropic's list for them, OpenAI's for the rest. Here, above both
dialects, so neither imports the other; errors take OpenAI's shape, as before."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from localspec.server.anthropic import models as anthropic
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.openai import errors
from localspec.server.openai import models as openai
from localspec.server.openai import schemas as s

router = APIRouter(dependencies=[Depends(require_key)])
error_response = errors.error_response


@router.get("/v1/models")
async def models(request: Request) -> Any:
    status = models_of(request).status()
    if anthropic.HEADER in request.headers:
        return anthropic.listing([st.card for st in status])
    return s.ModelList(data=[openai.card(st) for st in status])
