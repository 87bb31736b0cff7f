"""The models a server serves, by the name requests give, and their state. `Models` is `serve
--pair`'s: one model, loaded for the server's whole life. The router (router.py) has the same
face for a whole folder of models, loaded on demand: `get`, `ready`, `load`, `unload`, `status`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Protocol, TypeVar

from localspec.serving.errors import APIError
from localspec.serving.facade import Model, ModelCard

M = TypeVar("M")
TAG = ":latest"  # Ollama's clients name a model NAME:latest


@dataclass(frozen=True)
class Status:
    """One model as /models, /api/ps and `localspec list` show it."""

    name: str
    state: str  # loaded | loading | unloaded | unloading | error
    card: ModelCard
    kind: str = "pair"  # pair | gguf
    path: str = ""
    error: str | None = None  # why it is in error
    load_s: float | None = None  # how long its last load took
    loaded_at: float | None = None  # Unix seconds
    expires_at: float | None = None  # when it unloads if left idle (Unix seconds); None: never
    pid: int | None = None  # the process holding it
    memory: dict[str, int] | None = None  # what its memory plan needs: cpu_bytes, device_bytes
    running: int = 0
    waiting: int = 0


def pick(models: Mapping[str, M], name: str | None, *, default: str | None, exact: bool = False) -> M:
    """The model `name` names: THE one rule for every dialect (docs/serving.md, "Model names"). A
    name served (`NAME:latest` is `NAME`) is that model. No name, or a name not served (clients
    send their own: claude-..., gpt-...), is served by `default`, or by the one model when there is
    only one, as llama-server serves any name; among several with no default, no guess: a 400 (no
    name) or a 404. `exact`: managing a model (load, unload) takes only a name served."""
    if name:
        found = models.get(name) or (models.get(name[: -len(TAG)]) if name.endswith(TAG) else None)
        if found is not None:
            return found
    if not name or not exact:
        if default is not None and default in models:
            return models[default]
        if len(models) == 1:
            return next(iter(models.values()))
    if not name:
        raise APIError(
            400,
            f"name a model: this server serves {_served(models)}",
            param="model",
            code="model_not_specified",
        )
    raise not_found(name, models)


def not_found(name: str, models: Mapping[str, Any]) -> APIError:
    return APIError(
        404,
        f"unknown model {name!r}: this server serves {_served(models)}",
        param="model",
        code="model_not_found",
    )


def _served(models: Mapping[str, Any]) -> str:
    return ", ".join(repr(n) for n in models) or "no models"


class Registry(Protocol):
    """What a server's routes ask of the models it serves (`Models` below; router.Router)."""

    def __iter__(self) -> Iterator[Model]: ...

    def get(self, name: str | None) -> Model: ...

    async def ready(self, name: str | None) -> Model: ...

    async def load(self, name: str) -> Model: ...

    async def unload(self, name: str) -> Model: ...

    def status(self) -> list[Status]: ...


class Models:
    def __init__(self, models: list[Model]) -> None:
        self._by_name = {m.name: m for m in models}

    def __iter__(self) -> Iterator[Model]:
        return iter(self._by_name.values())

    def get(self, name: str | None) -> Model:
        """The model `name` names: any name is the one model (`pick`)."""
        return pick(self._by_name, name, default=None)

    async def ready(self, name: str | None) -> Model:
        return self.get(name)

    async def load(self, name: str) -> Model:
        return pick(self._by_name, name, default=None, exact=True)

    async def unload(self, name: str) -> Model:
        pick(self._by_name, name, default=None, exact=True)
        raise APIError(400, "this server serves one model (serve --pair); run `localspec serve` without "
                       "--pair to load and unload models by name")  # fmt: skip

    def status(self) -> list[Status]:
        return [
            Status(m.name, "loaded", m.card, pid=os.getpid(), running=m.load()[0], waiting=m.load()[1])
            for m in self._by_name.values()
        ]
