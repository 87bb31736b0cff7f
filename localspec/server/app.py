"""The app factory: `create_app(settings, engine_provider)` gives an ASGI app that loads the engine
at startup (before the port opens), serves the routes, and on shutdown cancels what is still running
and waits for the engine to let go of it before closing the models."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import anyio
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localspec.config.settings import Settings
from localspec.server import browser, errors, page
from localspec.server.body_text import lone_surrogate
from localspec.server.dialects import DIALECTS
from localspec.server.offload import LARGE_BODY
from localspec.server.openai.errors import error_response as openai_error
from localspec.server.pacing import RefusalPacing
from localspec.server.protocol import READ_TIMEOUT_S
from localspec.serving import bulk
from localspec.serving.errors import APIError
from localspec.serving.facade import Model
from localspec.serving.local import LocalModel
from localspec.serving.registry import Models
from localspec.serving.router import Router

log = logging.getLogger("localspec.server")
DRAIN_TIMEOUT_S = 30.0


def model_id(settings: Settings) -> str:
    """The name /v1/models lists and requests may use: the pair's folder, else the target's file."""
    if settings.pair is not None:
        p = Path(settings.pair)
        return (p.parent if p.suffix == ".toml" else p).resolve().name
    return Path(settings.target).stem if settings.target else "localspec"


def create_app(
    settings: Settings,
    engine_provider: Callable[[], Any] | None = None,
    *,
    model: Model | None = None,
    router: Callable[[], Router] | None = None,
) -> FastAPI:
    """`engine_provider()` returns a loaded Engine (the app closes it on shutdown, if it can);
    `model` is a ready model facade instead (tests/fake_engine.py's); `router()` makes the
    registry of a folder of models (router mode), which loads and unloads them itself."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.loop = asyncio.get_running_loop()  # where a SIGTERM's wind-down runs (shutdown.py)
        if model is not None:
            app.state.models = Models([model])
            yield
            return
        if router is not None:
            app.state.models = routed = router()
            routed.start()
            try:
                yield
            finally:
                await routed.close()
            return
        engine = await anyio.to_thread.run_sync(engine_provider)
        local = LocalModel(engine, settings, app.state.model_id)
        app.state.models = Models([local])
        app.state.dispatcher = local  # the served model's facade, by the name the tests know
        try:
            yield
        finally:
            clean = await local.drain(DRAIN_TIMEOUT_S)
            await anyio.to_thread.run_sync(local.acclog.flush, DRAIN_TIMEOUT_S)
            if local.lost is not None:
                pass  # an rpc-server dropped: freeing the models would talk to it and abort (reload.py)
            elif clean and hasattr(engine, "close"):
                engine.close()  # never while a generation still runs on the models
            elif not clean:
                log.warning(
                    "requests still running after %.0f s; leaving the models to the OS", DRAIN_TIMEOUT_S
                )

    # the schema is served by ops.py, behind the API key; no docs pages
    app = FastAPI(title="localspec", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.settings = settings
    app.state.router = router is not None
    app.state.model_id = "router" if router is not None else model_id(settings)
    errors.install(app, DIALECTS, default=openai_error)
    for dialect in DIALECTS:
        app.include_router(dialect.router)
    app.include_router(page.router)  # the chat page at / (server/ui/)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body)
    browser.install(app, settings)  # what a web page may do, before anything is read
    if settings.refusal_rate > 0:  # outermost: every refusal, the Host check's too
        app.add_middleware(RefusalPacing, rate=settings.refusal_rate)
    return app


class BodyLimit:
    """413 for a body over max_bytes, whether it says its length or is chunked. The body is read
    here (bounded) and replayed to the app, so the app never sees a partial one; a JSON body with a
    lone surrogate in a string is a 400 here, for every route (body_text.py)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        length = int(declared) if declared is not None and declared.isdigit() else None
        if length is not None and length > self.max_bytes:
            return await self._too_large(scope, receive, send)
        large = length is not None and length > LARGE_BODY
        # unread, a large body waits in the client's socket (uvicorn reads no further ahead) for the
        # bulk work's turn, within the time a request has to be read (protocol.py)
        async with bulk.turn(READ_TIMEOUT_S / 2) if large else nullcontext():
            data = await self._read(receive, large)
        if data is None:  # the client left before sending it all
            return
        if len(data) > self.max_bytes:
            return await self._too_large(scope, receive, send)
        # a body holding a surrogate's escape is parsed to find it: a large one off the event loop
        where = await bulk.run(lone_surrogate, data) if len(data) > LARGE_BODY else lone_surrogate(data)
        if where is not None:
            error = APIError(
                400,
                f"{where} holds a lone surrogate (half of a UTF-16 pair, escaped as \\uD800-\\uDFFF): "
                "not Unicode text; send the whole character",
                param=where,
            )
            return await errors.respond(scope, error)(scope, receive, send)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, large: bool) -> bytes | None:
        """The body, up to the first message past max_bytes; None if the client left first."""
        cpu = time.thread_time()
        body, more, size = [], True, 0
        while more and size <= self.max_bytes:
            message = await receive()
            if message["type"] != "http.request":
                return None
            body.append(message.get("body", b""))
            size += len(body[-1])
            more = message.get("more_body", False)
        data = b"".join(body)
        if large:  # the event loop's time for it (and for what ran beside it: an overcount, never under)
            bulk.spend(time.thread_time() - cpu)
        return data

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = APIError(
            413,
            f"the request body is larger than {self.max_bytes} bytes (--max-body)",
            code="request_too_large",
        )
        await errors.respond(scope, error)(scope, receive, send)
