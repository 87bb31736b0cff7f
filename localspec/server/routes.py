"""Routes: parse the request, hand it to the dispatcher, format what comes back. No generation here."""

from __future__ import annotations

import secrets
import time
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sse_starlette import EventSourceResponse

from localspec.errors import LocalspecError
from localspec.server import render, sse
from localspec.server import schemas as s
from localspec.server.errors import APIError, from_localspec
from localspec.server.service import Dispatcher


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


router = APIRouter()
v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_key)])


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    running, waiting = request.app.state.dispatcher.load()
    return {"status": "ok", "model": request.app.state.model_id, "running": running, "waiting": waiting}


@router.get("/openapi.json", dependencies=[Depends(require_key)], include_in_schema=False)
async def openapi(request: Request) -> JSONResponse:
    """The API's schema (for clients and fuzzers), behind the key like the API it describes."""
    return JSONResponse(request.app.openapi())


@router.get("/metrics", dependencies=[Depends(require_key)])
async def metrics(request: Request) -> Response:
    return Response(request.app.state.dispatcher.metrics.render(), media_type=CONTENT_TYPE_LATEST)


@v1.get("/models")
async def models(request: Request) -> s.ModelList:
    return s.ModelList(data=[s.ModelCard(id=request.app.state.model_id, created=_STARTED)])


@v1.post("/chat/completions")
async def chat_completions(body: s.ChatRequest, request: Request) -> Any:
    _check_common(body, request)
    return await _serve(request, body, _messages(body.messages), chat=True)


@v1.post("/completions")
async def completions(body: s.CompletionRequest, request: Request) -> Any:
    _check_common(body, request)
    if body.echo or body.suffix:
        raise APIError(400, "echo and suffix are not supported", param="echo" if body.echo else "suffix")
    prompt: Any = body.prompt
    if isinstance(prompt, list) and not prompt:
        raise APIError(400, "the prompt is empty", param="prompt")
    if isinstance(prompt, list) and isinstance(prompt[0], str):
        if len(prompt) != 1:
            raise APIError(400, "one prompt per request (a list of prompts is not supported)", param="prompt")
        prompt = prompt[0]
    return await _serve(request, body, prompt, chat=False)


router.include_router(v1)
_STARTED = int(time.time())


# -- helpers --------------------------------------------------------------------------------------
def _check_common(body: s.RequestBase, request: Request) -> None:
    if body.n != 1:
        raise APIError(400, f"n must be 1 (got {body.n}): one choice per request", param="n")
    if body.logprobs:
        raise APIError(400, "logprobs are not supported", param="logprobs")
    served = request.app.state.model_id
    if body.model not in (None, "", served):
        raise APIError(
            400,
            f"unknown model {body.model!r}: this server serves {served!r}",
            param="model",
            code="model_not_found",
        )


def _messages(messages: list[s.Message]) -> list[dict[str, str]]:
    """OpenAI messages -> what a chat template reads: role and plain text content."""
    out = []
    for i, m in enumerate(messages):
        if isinstance(m.content, list):
            if any(p.type != "text" for p in m.content):
                raise APIError(400, "only text content is supported", param=f"messages.{i}.content")
            content = "".join(p.text or "" for p in m.content)
        else:
            content = m.content or ""
        out.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    return out


async def _serve(request: Request, body: s.RequestBase, prompt: Any, *, chat: bool) -> Any:
    dispatcher: Dispatcher = request.app.state.dispatcher
    try:
        job = await dispatcher.submit(prompt, chat=chat, overrides=body.overrides())
    except LocalspecError as e:
        raise from_localspec(e, "messages" if chat else "prompt") from None
    except TypeError as e:  # a setting Settings.replace does not take: ours to fix, said plainly
        raise APIError(400, str(e)) from None
    reply = render.Reply(model=request.app.state.model_id, chat=chat)
    if body.stream:
        shutdown = anyio.Event()  # set by sse-starlette when the server shuts down
        return EventSourceResponse(
            sse.events(job, reply, body, shutdown),
            sep="\n",
            ping=15,
            shutdown_event=shutdown,
            shutdown_grace_period=sse.SHUTDOWN_GRACE_S,
        )
    resp = await job.result(request.is_disconnected)
    return JSONResponse(reply.full(resp).model_dump(mode="json"))
