"""OpenAI's error shape: {"error": {"message", "type", "param", "code"}} - as a response, and as the
last event of a stream that failed after its headers were sent."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from localspec.serving.errors import APIError


def body(e: APIError) -> dict:
    return {"error": {"message": e.message, "type": e.type, "param": e.param, "code": e.code}}


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(body(e), status_code=e.status, headers=e.headers)


def event(e: APIError) -> dict[str, str]:
    return {"data": error_response(e).body.decode()}
