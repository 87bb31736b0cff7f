"""The models a server serves, by the name requests give: one today (`serve --pair`); the router
(#49) will keep many here, loaded on demand."""

from __future__ import annotations

from typing import Iterator

from localspec.serving.errors import APIError
from localspec.serving.facade import Model


class Models:
    def __init__(self, models: list[Model]) -> None:
        self._by_name = {m.name: m for m in models}

    def __iter__(self) -> Iterator[Model]:
        return iter(self._by_name.values())

    def get(self, name: str | None, *, fallback: bool = False) -> Model:
        """The model `name` names; no name (or "") is the one served. `fallback`: a name this
        server does not know is served by the one model too (as llama-server does for Anthropic's
        clients, which send their own model names)."""
        if name in self._by_name:
            return self._by_name[name]
        if (not name or fallback) and len(self._by_name) == 1:
            return next(iter(self._by_name.values()))
        served = ", ".join(repr(n) for n in self._by_name)
        raise APIError(
            400, f"unknown model {name!r}: this server serves {served}", param="model", code="model_not_found"
        )
