"""The API key (--api-key): every API route depends on `require_key`. Clients send it as
`Authorization: Bearer KEY` (OpenAI's, Anthropic's ANTHROPIC_AUTH_TOKEN) or `x-api-key: KEY`
(Anthropic's SDKs, Claude Code's ANTHROPIC_API_KEY)."""

from __future__ import annotations

import secrets

from fastapi import Request

from localspec.serving.errors import APIError


def _given(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return token.strip()
    return request.headers.get("x-api-key")


def require_key(request: Request) -> None:
    key = request.app.state.settings.api_key
    if not key:
        return
    given = _given(request)
    if given is None or not secrets.compare_digest(given.encode(), key.encode()):
        raise APIError(
            401,
            "missing or wrong API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
