"""The API key (--api-key): every API route depends on `require_key`."""

from __future__ import annotations

import secrets

from fastapi import Request

from localspec.serving.errors import APIError


def require_key(request: Request) -> None:
    key = request.app.state.settings.api_key
    if not key:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), key.encode()):
        raise APIError(
            401,
            "missing or wrong API key: send 'Authorization: Bearer KEY'",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
