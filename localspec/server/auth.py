"""The API key (--api-key): every API route depends on `require_key`; /health asks `has_key` what
it may tell. Clients send the key as `Authorization: Bearer KEY` (OpenAI's, Anthropic's
ANTHROPIC_AUTH_TOKEN) or `x-api-key: KEY` (Anthropic's SDKs, Claude Code's ANTHROPIC_API_KEY)."""

from __future__ import annotations

import secrets

from fastapi import Request

from localspec.serving.errors import APIError


def _given(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return token.strip()
    return request.headers.get("x-api-key")


def has_key(request: Request) -> bool:
    """Whether the request may use the API: it carries the key, or none is set."""
    key = request.app.state.settings.api_key
    if not key:
        return True
    given = _given(request)
    return given is not None and secrets.compare_digest(given.encode(), key.encode())


def require_key(request: Request) -> None:
    if not has_key(request):
        raise APIError(
            401,
            "missing or wrong API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
