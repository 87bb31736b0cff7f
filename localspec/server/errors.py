"""Every error in the shape of the dialect the request spoke, whatever went wrong: a route's
APIError, a body that is not JSON or fails its schema, an unknown path, an oversized body, a bug.
The dialect is found by the request's path (`Shapes`, built from the dialects' routes)."""

from __future__ import annotations

import email.message
import logging
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import Scope

from localspec.errors import LocalspecError
from localspec.serving.errors import APIError, from_localspec

log = logging.getLogger("localspec.server")
Shape = Callable[[APIError], Response]


class Shapes:
    """path -> the error shape of the dialect serving it. A path no route has takes the shape of
    the dialect whose PREFIX it starts with (Ollama's /api/), else the default (OpenAI's)."""

    def __init__(self, dialects: Sequence[Any], default: Shape) -> None:
        self.default = default
        self.by_path = {r.path: d.error_response for d in dialects for r in d.router.routes}
        prefixes = [(d.PREFIX, d.error_response) for d in dialects if getattr(d, "PREFIX", None)]
        self.prefixes = sorted(prefixes, key=lambda p: -len(p[0]))

    def __call__(self, path: str) -> Shape:
        shape = self.by_path.get(path)
        if shape is None:
            shape = next((s for prefix, s in self.prefixes if path.startswith(prefix)), self.default)
        return shape


def respond(scope: Scope, error: APIError) -> Response:
    """`error` in the shape of the dialect of the request in `scope` (middleware use this too)."""
    return scope["app"].state.error_shapes(scope["path"])(error)


def is_json(content_type: str) -> bool:
    """A JSON media type, as FastAPI decides it does (application/json, application/*+json)."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def _validation_message(e: RequestValidationError) -> tuple[str, str | None]:
    first = e.errors()[0] if e.errors() else {}
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON: {first.get('ctx', {}).get('error', '')}".rstrip(
            ": "
        ), None
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    param = ".".join(loc) or None
    return (
        f"{param}: {first.get('msg', 'invalid')}" if param else first.get("msg", "invalid request")
    ), param


def install(app: FastAPI, dialects: Sequence[Any], default: Shape) -> None:
    app.state.error_shapes = Shapes(dialects, default)

    @app.exception_handler(APIError)
    async def _api(request: Request, e: APIError) -> Response:
        return respond(request.scope, e)

    @app.exception_handler(LocalspecError)
    async def _localspec(request: Request, e: LocalspecError) -> Response:
        return respond(request.scope, from_localspec(e))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> Response:
        content_type = request.headers.get("content-type", "")
        if request.method == "POST" and not is_json(content_type):  # FastAPI parsed nothing
            error = APIError(
                415,
                f"send the body as JSON with 'Content-Type: application/json' (got {content_type[:80]!r})",
                code="unsupported_media_type",
            )
            return respond(request.scope, error)
        message, param = _validation_message(e)
        return respond(request.scope, APIError(400, message, param=param))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, e: HTTPException) -> Response:
        return respond(request.scope, APIError(e.status_code, str(e.detail), headers=dict(e.headers or {})))

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception) -> Response:
        log.exception("internal error")
        return respond(request.scope, APIError(500, f"internal error: {type(e).__name__}: {e}"))
