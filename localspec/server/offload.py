"""Nothing a request sends runs on the event loop in proportion to its size: FastAPI parses a JSON
body and validates it against the route's model on the loop (a 7 MB body froze every client,
/health included, for seconds), so `Route` does both for a body past LARGE_BODY on the bulk thread
(serving/bulk.py: one at a time) and hands FastAPI the validated model (which it takes as it is); a route then turns the model into
the internal request with `run` (also a worker's). The limits on what a body may hold are in
docs/serving.md: --max-body (413), MAX_OBJECTS and fields.MAX_ITEMS (400)."""

from __future__ import annotations

import functools
import json
import typing
from typing import Any, Callable, Coroutine, TypeVar

import anyio
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError

from localspec.server.errors import is_json
from localspec.serving import bulk, text_ops
from localspec.serving.errors import APIError

LARGE_BODY = 64 * 1024  # bytes: a smaller body is parsed where it is read (a thread costs more)
CHUNK = 1000  # a long list's items validated at a time (the GIL is held for one validation)
# JSON objects a body may hold (messages, parts, calls, tools, schema nodes): each costs a template
# ITEM_CHARS at least, and no more than MAX_TEXT characters are rendered (issue 60: 60k calls or 150k
# messages took 0.3-0.8 s of validation each, under the GIL, only to be refused after it)
MAX_OBJECTS = text_ops.MAX_TEXT // text_ops.ITEM_CHARS
T = TypeVar("T")


class Route(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        field = self.body_field
        if field is None:
            return handler

        async def parsed_off_the_loop(request: Request) -> Response:
            body = await request.body()
            if len(body) > LARGE_BODY and is_json(request.headers.get("content-type", "")):
                request._json = await bulk.run(_validated, field, body)
            return await handler(request)

        return parsed_off_the_loop


def _validated(field: Any, body: bytes) -> Any:
    """The body as the route's model, or the RequestValidationError FastAPI would raise."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error", "input": {},
              "ctx": {"error": e.msg}}]
        ) from None  # fmt: skip
    except RecursionError:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error", "input": {},
              "ctx": {"error": "nested too deep"}}]
        ) from None  # fmt: skip
    if body.count(b"{") > MAX_OBJECTS and _objects(value) > MAX_OBJECTS:  # the count, a C scan, first
        raise APIError(
            400,
            f"the body holds more than {MAX_OBJECTS} JSON objects (messages, content parts, calls, tools, "
            f"schema nodes): each counts {text_ops.ITEM_CHARS} characters of a prompt, and at most "
            f"{text_ops.MAX_TEXT} are rendered",
            param="body",
            code="too_many_items",
        )
    if isinstance(value, dict) and isinstance(field.field_info.annotation, type):
        value = _items_first(field.field_info.annotation, value)
    out, errors = field.validate(value, {}, loc=("body",))
    if errors:
        raise RequestValidationError(errors)
    return out


def _objects(value: Any) -> int:
    """The JSON objects in a parsed body, counted up to one past MAX_OBJECTS (a loop: any depth)."""
    n, stack = 0, [value]
    while stack and n <= MAX_OBJECTS:
        v = stack.pop()
        if isinstance(v, dict):
            n += 1
            stack.extend(x for x in v.values() if isinstance(x, (dict, list)))
        elif isinstance(v, list):
            stack.extend(x for x in v if isinstance(x, (dict, list)))
    return n


def _items_first(model: type, value: dict) -> dict:
    """`value` with its long lists (messages, input items, an assistant turn's calls, at any depth
    of the model) validated CHUNK items at a time: pydantic holds the GIL for a whole validation,
    and the event loop waits for it (1.3 s for 60k items on a loaded machine), while a chunk's is
    short. The body's validation then takes the items as they are. A chunk that fails leaves its
    list to that validation, which says where, as for any body."""
    out = value
    for key, kind, nested in _lists(model):
        items = value.get(key)
        if not isinstance(items, list):
            continue
        new = [_items_first(kind, x) if isinstance(x, dict) else x for x in items] if nested else items
        if len(new) > CHUNK:
            adapter = _adapter(kind)
            try:
                new = [
                    x for i in range(0, len(new), CHUNK) for x in adapter.validate_python(new[i : i + CHUNK])
                ]
            except ValidationError:
                pass
        if new is not items:
            out = {**out, key: new} if out is value else out | {key: new}
    return out


@functools.lru_cache(maxsize=256)
def _lists(model: type, _inside: frozenset = frozenset()) -> tuple[tuple[str, Any, bool], ...]:
    """A model's list fields: (its key, the item type, whether those items have list fields; a
    model that holds itself is not gone into again)."""
    out, inside = [], _inside | {model}
    for name, f in (model.model_fields if issubclass(model, BaseModel) else {}).items():
        kind = _list_of(f.annotation)
        if kind is not None:
            is_model = isinstance(kind, type) and issubclass(kind, BaseModel) and kind not in inside
            out.append((f.alias or name, kind, is_model and bool(_lists(kind, inside))))
    return tuple(out)


def _list_of(annotation: Any) -> Any:
    """X, where `annotation` is list[X] or holds one (list[X] | None, str | Annotated[list[X], ...])."""
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation)[0]
    for arg in typing.get_args(annotation):
        found = _list_of(arg)
        if found is not None:
            return found
    return None


@functools.lru_cache(maxsize=32)
def _adapter(kind: Any) -> TypeAdapter:
    return TypeAdapter(list[kind])


async def run(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread: a route's parse of a body into the internal request."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))
