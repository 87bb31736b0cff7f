"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}, whatever went wrong."""

from __future__ import annotations

import email.message
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from localspec.errors import GenerationFailed, LocalspecError, PromptTooLong
from localspec.server.schemas import ErrorBody, ErrorResponse

log = logging.getLogger("localspec.server")


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body = ErrorResponse(
            error=ErrorBody(message=self.message, type=self.type, param=self.param, code=self.code)
        )
        return JSONResponse(body.model_dump(), status_code=self.status, headers=self.headers)


def from_localspec(e: LocalspecError, prompt_param: str | None = None) -> APIError:
    """Bad input the engine refused (it raises before anything is queued): a 400; a generation that
    failed inside the engine afterwards is the server's fault: a 500."""
    if isinstance(e, GenerationFailed):
        return APIError(500, str(e), type="server_error", code="generation_failed")
    if isinstance(e, PromptTooLong):
        return APIError(400, str(e), param=prompt_param, code="context_length_exceeded")
    return APIError(400, str(e))


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


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api(request: Request, e: APIError) -> JSONResponse:
        return e.response()

    @app.exception_handler(LocalspecError)
    async def _localspec(request: Request, e: LocalspecError) -> JSONResponse:
        return from_localspec(e).response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        content_type = request.headers.get("content-type", "")
        if request.method == "POST" and not is_json(content_type):  # FastAPI parsed nothing
            return APIError(
                415,
                f"send the body as JSON with 'Content-Type: application/json' (got {content_type[:80]!r})",
                code="unsupported_media_type",
            ).response()
        message, param = _validation_message(e)
        return APIError(400, message, param=param).response()

    @app.exception_handler(HTTPException)
    async def _http(request: Request, e: HTTPException) -> JSONResponse:
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return APIError(e.status_code, str(e.detail), type=kind, headers=dict(e.headers or {})).response()

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception) -> JSONResponse:
        log.exception("internal error")
        return APIError(500, f"internal error: {type(e).__name__}: {e}", type="server_error").response()
