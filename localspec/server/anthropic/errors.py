"""Anthropic's error shape: {"type": "error", "error": {"type", "message"}} - as a response, and as
the `error` event that ends a stream which failed after its headers were sent."""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse

from localspec.serving.errors import APIError

# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors)
TYPES = {
    401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error",
}  # fmt: skip


def body(e: APIError) -> dict:
    kind = TYPES.get(e.status) or ("api_error" if e.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": e.message}}


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(body(e), status_code=e.status, headers=e.headers)


def event(e: APIError) -> dict[str, str]:
    return {"event": "error", "data": json.dumps(body(e), ensure_ascii=False)}
