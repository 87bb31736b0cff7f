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

from localspec.chat.output import parse_answer
from localspec.errors import LocalspecError
from localspec.server import chat_plan, render, sse
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
    engine = request.app.state.dispatcher.engine
    n_ctx = engine.target_ctx.n_ctx
    target = engine.target
    meta = s.ModelMeta(
        n_ctx=n_ctx, n_ctx_train=target.n_ctx_train, n_vocab=target.n_vocab,
        n_params=target.n_params, size=target.size_bytes,
    )  # fmt: skip
    card = s.ModelCard(id=request.app.state.model_id, created=_STARTED, max_model_len=n_ctx, meta=meta)
    return s.ModelList(data=[card])


@router.post("/tokenize", dependencies=[Depends(require_key)])
async def tokenize(body: s.TokenizeRequest, request: Request) -> dict[str, Any]:
    """llama-server's /tokenize: {"tokens": [...]}, with pieces {"id", "piece"} when asked."""
    target = request.app.state.dispatcher.engine.target
    ids = target.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
    if not body.with_pieces:
        return {"tokens": ids}
    out = []
    for t in ids:
        b = target.token_bytes(t, special=True)
        try:
            piece: Any = b.decode("utf-8")
        except UnicodeDecodeError:  # part of a character: its bytes, as llama-server gives them
            piece = list(b)
        out.append({"id": t, "piece": piece})
    return {"tokens": out}


@router.post("/detokenize", dependencies=[Depends(require_key)])
async def detokenize(body: s.DetokenizeRequest, request: Request) -> dict[str, Any]:
    target = request.app.state.dispatcher.engine.target
    bad = next((t for t in body.tokens if not 0 <= t < target.n_vocab), None)
    if bad is not None:
        raise APIError(400, f"token {bad} is not in the vocabulary (0..{target.n_vocab - 1})", param="tokens")
    return {"content": target.detokenize(body.tokens, special=True)}


@v1.post("/chat/completions")
async def chat_completions(body: s.ChatRequest, request: Request) -> Any:
    _check_common(body, request)
    fmt = body.reasoning_format or request.app.state.settings.reasoning_format
    try:
        cp = await anyio.to_thread.run_sync(
            lambda: chat_plan.plan(request.app.state.dispatcher.engine, body, fmt)
        )
    except LocalspecError as e:
        raise from_localspec(e, "messages") from None
    return await _serve(request, body, cp.prompt_ids, chat=False, plan=cp)


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
    field = body.unsupported()
    if field is not None:
        raise APIError(
            400,
            f"{field!r} is not supported by this server (docs/apps.md lists the fields that are)",
            param=field,
        )
    parallel = request.app.state.settings.parallel
    if not 1 <= body.n <= parallel:
        raise APIError(400, f"n must be between 1 and --parallel ({parallel}); got {body.n}", param="n")
    served = request.app.state.model_id
    if body.model not in (None, "", served):
        raise APIError(
            400,
            f"unknown model {body.model!r}: this server serves {served!r}",
            param="model",
            code="model_not_found",
        )


async def _serve(
    request: Request, body: s.RequestBase, prompt: Any, *, chat: bool, plan: chat_plan.ChatPlan | None = None
) -> Any:
    dispatcher: Dispatcher = request.app.state.dispatcher
    overrides = body.overrides() | (plan.overrides if plan else {})
    jobs = []
    try:
        for i in range(body.n):  # n choices: n sequences from one prompt (the slots share its cache)
            o = (
                overrides
                if i == 0 or "seed" not in overrides
                else overrides | {"seed": overrides["seed"] + i}
            )
            keep = plan.keep_special if plan else ()
            jobs.append(await dispatcher.submit(prompt, chat=chat, overrides=o, keep_special=keep))
    except LocalspecError as e:
        _cancel(jobs)
        raise from_localspec(e, "messages" if plan else "prompt") from None
    except TypeError as e:  # a setting Settings.replace does not take: ours to fix, said plainly
        _cancel(jobs)
        raise APIError(400, str(e)) from None
    except BaseException:
        _cancel(jobs)
        raise
    target = dispatcher.engine.target
    reply = render.Reply(
        model=request.app.state.model_id, chat=plan is not None or chat, token_bytes=target.token_bytes
    )
    parsers = [plan.make_parser() for _ in jobs] if plan else None
    if body.stream:
        shutdown = anyio.Event()  # set by sse-starlette when the server shuts down
        return EventSourceResponse(
            sse.events(jobs, reply, body, shutdown, parsers),
            sep="\n",
            ping=15,
            shutdown_event=shutdown,
            shutdown_grace_period=sse.SHUTDOWN_GRACE_S,
        )
    try:
        resps = [await job.result(request.is_disconnected) for job in jobs]
    finally:
        _cancel(jobs)
    messages = [parse_answer(p, r.text)[0] for p, r in zip(parsers, resps)] if parsers else None
    return JSONResponse(render.wire(reply.full(resps, messages)))


def _cancel(jobs: list) -> None:
    for job in jobs:
        if job.response is None:
            job.cancel()
