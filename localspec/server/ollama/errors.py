"""Ollama's error shape: {"error": "message"} with the status (an unknown model is a 404, as
Ollama's own); as the last NDJSON line of a stream that failed after its headers were sent."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from localspec.serving.errors import APIError


def body(e: APIError) -> dict:
    return {"error": e.message}


def error_response(e: APIError) -> JSONResponse:
    status = 404 if e.code == "model_not_found" else e.status
    return JSONResponse(body(e), status_code=status, headers=e.headers)


def line(e: APIError) -> dict:
    return body(e)
