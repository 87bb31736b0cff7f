"""OpenAI's legacy completions, POST /v1/completions: a raw prompt (text or token ids, no template),
or with `suffix` a fill-in-the-middle request (the prompt before the middle, the suffix after it)
-> the internal request (`parse`); the events -> one text_completion object (`render`) or its chunk
stream (`render_stream`: text pieces with optional draft marks and logprobs in the legacy shape,
each choice's finish with timings, the include_usage chunk, [DONE])."""

from __future__ import annotations

from typing import Any, AsyncIterator, Sequence

from fastapi import APIRouter, Depends, Request

from localspec.server import offload, shared
from localspec.server.auth import require_key
from localspec.server.fields import refuse_unsupported
from localspec.server.openai import common, errors
from localspec.server.openai import schemas as s
from localspec.serving import Delta, Finished, Progress, Stream
from localspec.serving import request as internal
from localspec.serving.errors import APIError
from localspec.serving.fim import Fill

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response


@router.post("/v1/completions")
async def completions(body: s.CompletionRequest, request: Request) -> Any:
    return await common.respond(
        request,
        await offload.run(parse, body),
        "cmpl-",
        render,
        lambda stream, ids: render_stream(stream, ids, body),
    )


def parse(body: s.CompletionRequest) -> internal.Request:
    refuse_unsupported(body)
    if body.echo:
        raise APIError(400, "echo is not supported", param="echo")
    prompt: Any = body.prompt
    if isinstance(prompt, list) and not prompt:
        raise APIError(400, "the prompt is empty", param="prompt")
    if isinstance(prompt, list) and isinstance(prompt[0], str):
        if len(prompt) != 1:
            raise APIError(400, "one prompt per request (a list of prompts is not supported)", param="prompt")
        prompt = prompt[0]
    fill = None
    if body.suffix is not None:  # fill-in-the-middle: the prompt is the text before the middle
        if not isinstance(prompt, str):
            raise APIError(
                400, "with suffix, the prompt is text (the code before the middle)", param="prompt"
            )
        fill, prompt = Fill(prompt, body.suffix), None
    return internal.Request(
        prompt=tuple(prompt) if isinstance(prompt, list) else prompt,
        fill=fill,
        overrides=body.overrides(),
        n=body.n,
        stream=body.stream,
        progress=body.stream and body.return_progress,
        model=body.model,
        keep_alive=internal.keep_alive(body.keep_alive),
    )


def render(done: Sequence[Finished], ids: common.Ids) -> dict:
    choices = [
        s.CompletionChoice(
            index=f.choice,
            text=f.response.text,
            finish_reason=f.reason,
            logprobs=common.completion_logprobs(f.logprobs) if f.logprobs is not None else None,
        )  # fmt: skip
        for f in done
    ]
    completion = s.Completion(
        id=ids.id, created=ids.created, model=ids.model, choices=choices,
        usage=common.usage(done), timings=shared.timings(done[0].response),
    )  # fmt: skip
    return common.wire(completion)


async def render_stream(
    stream: Stream, ids: common.Ids, body: s.CompletionRequest
) -> AsyncIterator[dict[str, str]]:
    want_lp = body.logprobs not in (None, False)  # logprobs 0 (== False) streams none, as before

    def chunk(index: int, text: str, **extra: Any) -> dict[str, str]:
        lp, finish = extra.pop("logprobs", None), extra.pop("finish", None)
        choice = s.CompletionChoice(index=index, text=text, finish_reason=finish, logprobs=lp)
        c = s.Completion(id=ids.id, created=ids.created, model=ids.model, choices=[choice], **extra)
        return {"data": common.dump(c, usage_null=body.include_usage)}

    done = []
    async for e in stream:
        if isinstance(e, Delta):
            lp = common.completion_logprobs(e.logprobs) if want_lp and e.logprobs else None
            marks = common.draft_marks(e.from_draft) if body.mark_drafts else None
            yield chunk(e.choice, e.content, logprobs=lp, localspec=marks)
        elif isinstance(e, Progress):
            yield chunk(e.choice, "", prompt_progress=common.progress(e))
        else:
            done.append(e)
            lp = common.completion_logprobs(e.tail_logprobs) if want_lp and e.tail_logprobs else None
            yield chunk(e.choice, "", finish=e.reason, timings=shared.timings(e.response), logprobs=lp)
    for frame in common.closing(s.Completion, done, ids, body.include_usage):
        yield frame
