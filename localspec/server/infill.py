"""llama-server's POST /infill, as llama.vim and llama.vscode send it: the text around the cursor and
the other files' chunks -> the one fill-in-the-middle request (`parse`); the events -> llama-server's
/completion object (`render`: content, stop_type, truncated, tokens_cached, timings; only the
`response_fields` asked for, by their "a/b" paths) or its SSE stream (`render_stream`: a frame per
piece, then the last one with "stop": true; no [DONE]). Errors in OpenAI's shape, as llama-server's.

`samplers` names llama-server's chain: a filter it leaves out is off (temperature 1, unless the
request gives one), "infill" turns on the infill sampler; the chain's order is ours (top-k, top-p,
min-p, temperature, infill). `n_predict` 0 evaluates the prompt only (llama.vim's cache warm-up: an
empty answer); `t_max_prompt_ms` is read and, as in llama-server, not used."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, ClassVar, Sequence

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from localspec.server import framing, offload, shared
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.fields import MAX_ITEMS, Checked, refuse_unsupported
from localspec.server.openai import errors
from localspec.server.openai import schemas as s
from localspec.serving import Delta, Finished, Stream
from localspec.serving import request as internal
from localspec.serving.errors import APIError
from localspec.serving.fim import Extra, Fill

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response

# llama-server's sampler names (and their one-letter forms): what each one turns off when left out
FILTERS = {
    "top_k": ("top_k", 0),
    "top_p": ("top_p", 1.0),
    "min_p": ("min_p", 0.0),
    "temperature": ("temperature", 1.0),
}
NEUTRAL = frozenset({"penalties", "dry", "typ_p", "typical_p", "xtc", "top_n_sigma"})  # off at their defaults
LETTERS = {"e": "penalties", "d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma",
           "x": "xtc", "i": "infill", "t": "temperature", "m": "min_p"}  # fmt: skip


class Chunk(Checked):
    IGNORED: ClassVar[frozenset[str]] = frozenset({"time"})  # llama.vim's: when it was picked
    text: str
    filename: str = "tmp"


class InfillRequest(s.Overrides):
    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {"cache_prompt", "id_slot", "t_max_prompt_ms", "timings_per_token", "return_progress", "n_cmpl"}
    )  # fmt: skip
    model: str | None = None
    input_prefix: str
    input_suffix: str
    input_extra: list[Chunk] | None = Field(None, max_length=MAX_ITEMS)
    prompt: str = ""
    n_predict: int | None = None
    samplers: list[str] | str | None = None
    stream: bool = False
    response_fields: list[str] | None = None
    t_max_predict_ms: int | None = None  # -1: off, as llama-server's


@router.post("/infill")
async def infill(body: InfillRequest, request: Request) -> Any:
    req = parse(body)
    model = models_of(request).get(req.model)
    stream = await model.submit(req)
    prompt_only = body.n_predict == 0
    if req.stream:
        return framing.sse(request, stream, render_stream(stream, model.name, prompt_only), errors.event)
    done = await stream.finished(request.is_disconnected)
    return JSONResponse(render(done, model.name, body.response_fields, prompt_only))


def parse(body: InfillRequest) -> internal.Request:
    refuse_unsupported(body)
    extra = tuple(Extra(c.text, c.filename) for c in body.input_extra or ())
    fill = Fill(body.input_prefix, body.input_suffix, extra, body.prompt)
    over = body.setting_overrides()
    over.pop("t_max_predict_ms", None)
    if body.t_max_predict_ms is not None and body.t_max_predict_ms > 0:
        over["t_max_predict_ms"] = body.t_max_predict_ms
    if body.n_predict is not None and body.n_predict >= 0:
        over["max_tokens"] = max(body.n_predict, 1)  # 0: the prompt's pass and one token, not shown
    over.update(chain(body.samplers, over))
    return internal.Request(fill=fill, overrides=over, stream=body.stream, model=body.model)


def chain(samplers: list[str] | str | None, given: dict[str, Any]) -> dict[str, Any]:
    """Settings overrides for llama-server's `samplers` (None: its default chain, ours)."""
    if samplers is None:
        return {}
    names = [LETTERS.get(c, c) for c in samplers] if isinstance(samplers, str) else list(samplers)
    unknown = [n for n in names if n not in FILTERS and n not in NEUTRAL and n != "infill"]
    if unknown:
        known = ", ".join([*FILTERS, "infill", *sorted(NEUTRAL)])
        raise APIError(
            400, f"samplers: {unknown[0]!r} is not a sampler here (known: {known})", param="samplers"
        )
    out: dict[str, Any] = {"infill": "infill" in names}
    for name, (field, off) in FILTERS.items():
        if name not in names and not (name == "temperature" and "temperature" in given):
            out[field] = off
    return out


def _stop_type(f: Finished) -> str:
    r = f.response
    if r.finish_reason == "stop":
        return "word" if r.stop_string is not None else "eos"
    return "limit"


def completion(f: Finished, model: str, content: str) -> dict[str, Any]:
    """llama-server's /completion object for a finished choice."""
    st = f.response.stats
    return {
        "index": f.choice, "content": content, "tokens": [], "id_slot": 0, "stop": True, "model": model,
        "tokens_predicted": st.n_generated, "tokens_evaluated": st.n_prompt_tokens,
        "has_new_line": "\n" in f.response.text, "truncated": f.truncated or f.response.finish_reason == "context",
        "stop_type": _stop_type(f), "stopping_word": f.response.stop_string or "",
        "tokens_cached": st.n_prompt_tokens + st.n_generated,  # what the slot's cache holds after it
        "timings": shared.timings(f.response).model_dump(mode="json"),
    }  # fmt: skip


def picked(obj: dict[str, Any], paths: Sequence[str] | None) -> dict[str, Any]:
    """Only the fields asked for, each under its path ("timings/prompt_n"), as llama-server does."""
    if not paths:
        return obj
    out = {}
    for path in paths:
        cur: Any = obj
        for key in path.split("/"):
            if not isinstance(cur, dict) or key not in cur:
                break
            cur = cur[key]
        else:
            out[path] = cur
    return out


def render(done: Sequence[Finished], model: str, fields: Sequence[str] | None, prompt_only: bool) -> dict:
    f = done[0]
    return picked(completion(f, model, "" if prompt_only else f.response.text), fields)


async def render_stream(stream: Stream, model: str, prompt_only: bool) -> AsyncIterator[dict[str, str]]:
    async for e in stream:
        if isinstance(e, Delta):
            if e.content and not prompt_only:
                frame = {"index": e.choice, "content": e.content, "tokens": [], "stop": False, "id_slot": 0}
                yield {"data": json.dumps(frame, ensure_ascii=False)}
        else:
            yield {"data": json.dumps(completion(e, model, ""), ensure_ascii=False)}
