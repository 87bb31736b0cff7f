"""What the app keeps for its routes, read through one typed accessor (the app's lifespan sets it:
app.py)."""

from __future__ import annotations

from fastapi import Request

from localspec.serving.registry import Registry


def models_of(request: Request) -> Registry:
    """The models this server serves: one (`serve --pair`) or a folder's (the router)."""
    return request.app.state.models
