"""What operators and tools ask a server: GET /health (load), /metrics (Prometheus), /openapi.json
(the API's schema, for clients and fuzzers; behind the key like the API it describes)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from localspec.server import metrics
from localspec.server.auth import has_key, require_key
from localspec.server.openai import errors

router = APIRouter()
error_response = errors.error_response


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    """Liveness for anyone (a load balancer, the page before it has a key); what model is served and
    how busy it is only for a caller with the key, when one is set (docs/serving.md)."""
    if not has_key(request):
        return {"status": "ok"}
    model = request.app.state.models.get(None)
    running, waiting = model.load()
    return {"status": "ok", "model": model.name, "running": running, "waiting": waiting}


@router.get("/openapi.json", dependencies=[Depends(require_key)], include_in_schema=False)
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/metrics", dependencies=[Depends(require_key)])
async def prometheus(request: Request) -> Response:
    return Response(metrics.render(request.app.state.models.get(None)), media_type=CONTENT_TYPE_LATEST)
