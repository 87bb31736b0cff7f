"""What operators and tools ask a server: GET /health (load), /metrics (Prometheus), /openapi.json
(the API's schema, for clients and fuzzers; behind the key like the API it describes)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from localspec.server import metrics
from localspec.server.app_state import models_of
from localspec.server.auth import has_key, require_key
from localspec.server.openai import errors

router = APIRouter()
error_response = errors.error_response


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    """Liveness for anyone (a load balancer, the page before it has a key); what is served and how
    busy it is only for a caller with the key, when one is set (docs/serving.md). A router's: what
    is loaded and the load over all of them."""
    if not has_key(request):
        return {"status": "ok"}
    status = models_of(request).status()
    running, waiting = sum(s.running for s in status), sum(s.waiting for s in status)
    if not request.app.state.router:
        return {"status": "ok", "model": status[0].name, "running": running, "waiting": waiting}
    loaded = [s.name for s in status if s.state == "loaded"]
    return {"status": "ok", "models": len(status), "loaded": loaded, "running": running, "waiting": waiting}


@router.get("/openapi.json", dependencies=[Depends(require_key)], include_in_schema=False)
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/metrics", dependencies=[Depends(require_key)])
async def prometheus(request: Request) -> Response:
    return Response(metrics.render(models_of(request)), media_type=CONTENT_TYPE_LATEST)
