"""Anthropic's model list (GET /v1/models with an `anthropic-version` header: its SDKs' and
Claude Code's): each served model with the context it serves as `max_input_tokens`."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable

from localspec.serving import ModelCard

HEADER = "anthropic-version"  # what every Anthropic client sends, and OpenAI's never do


def listing(cards: Iterable[ModelCard]) -> dict[str, Any]:
    data = [
        {
            "type": "model",
            "id": c.name,
            "display_name": c.name,
            "lifecycle": "active",
            "created_at": datetime.fromtimestamp(c.created, timezone.utc).isoformat().replace("+00:00", "Z"),
            "max_input_tokens": c.n_ctx,
            "max_tokens": c.n_ctx,
        }  # fmt: skip
        for c in cards
    ]
    ids = [d["id"] for d in data]
    return {
        "data": data,
        "has_more": False,
        "first_id": ids[0] if ids else None,
        "last_id": ids[-1] if ids else None,
    }
