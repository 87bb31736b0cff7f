"""The one place engine chunks become events (serving/answer.py, serving/stream.py), without a
model: chunks posted from another thread as the engine thread does, read on the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from localspec.chat.parsers.base import Parser
from localspec.chat.reasoning import Reasoning
from localspec.engine import Chunk, Progress, Response
from localspec.serving import APIError, Delta, Finished, events
from localspec.serving.answer import Answer
from localspec.serving.stream import EventStream

from ..fake_engine import _stats


class Handle:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def response(text: str, tokens: list[int], logprobs: list | None = None) -> Response:
    return Response(text, tokens, "stop", _stats(3, len(tokens), (2, 1)), [1, 2, 3], 7, logprobs)


def start(parsers: list, ended: list, progress: bool = False) -> EventStream:
    answers = [Answer(i, p, lambda t: bytes([t])) for i, p in enumerate(parsers)]
    stream = EventStream(
        answers, asyncio.get_running_loop(), lambda _, i, r, e: ended.append((i, r, e)), progress=progress
    )
    stream.handles = [Handle() for _ in parsers]
    return stream


def post(stream: EventStream, choice: int, items: list) -> None:
    """What the engine thread does: every item through the choice's sink, from another thread."""
    sink = stream.sink(choice)
    t = threading.Thread(target=lambda: [sink(item) for item in items])
    t.start()
    t.join()


def test_chunks_become_events_with_their_marks_and_logprobs():
    async def run() -> tuple[list, list]:
        ended: list = []
        stream = start([Reasoning(Parser()), None], ended)
        lp = (-0.5, ((65, -0.5),))
        resp0 = response("<think>hm</think>A", [1, 2, 65], [lp] * 3)
        post(stream, 0, [
            Chunk("<think>h", [1], [True], logprobs=[lp]), Chunk("", [2], [True], logprobs=[lp]),
            Chunk("m</think>A", [65], [False], logprobs=[lp]), Chunk("", [], [], resp0), None,
        ])  # fmt: skip
        post(
            stream,
            1,
            [Chunk("xy", [120, 121], [False, True]), Chunk("", [], [], response("xy", [120, 121])), None],
        )
        await asyncio.sleep(0.01)  # the loop runs the posted callbacks
        assert [i for i, _, _ in ended] == [0, 1]  # booked before anyone reads
        return [e async for e in stream], ended

    events, ended = asyncio.run(run())
    first = [e for e in events if e.choice == 0]
    assert [(e.reasoning, e.content) for e in first if isinstance(e, Delta)] == [
        ("h", ""),
        ("m", ""),
        ("", "A"),
    ]
    assert first[0].from_draft == (True,) and first[1].from_draft == (True, False)  # the held mark rides on
    assert [lp.token for lp in first[1].logprobs] == [2, 65] and first[1].logprobs[0].bytes == b"\x02"
    done = first[-1]
    assert isinstance(done, Finished) and done.message.reasoning == "hm" and done.message.content == "A"
    assert len(done.logprobs) == 3 and done.tail_logprobs == () and done.reason == "stop"
    second = [e for e in events if e.choice == 1]
    assert second[0].content == "xy" and second[-1].logprobs is None
    assert all(r is not None and e is None for _, r, e in ended)


def test_leaving_early_cancels_and_a_cancelled_choice_is_a_shutdown_error():
    async def run() -> None:
        ended: list = []
        stream = start([None], ended)
        post(stream, 0, [Chunk("a", [97], [False])])
        events = aiter(stream)
        await anext(events)
        await events.aclose()  # what a closed connection does to the stream's reader
        assert stream.handles[0].cancelled
        stream = start([None], ended)
        post(stream, 0, [Chunk("a", [97], [False]), None])  # cancelled: no Response
        with pytest.raises(APIError, match="shutting down"):
            [e async for e in stream]
        assert ended[-1][1:] == (None, None)

    asyncio.run(run())


def test_a_lost_engine_ends_every_choice_with_its_error():
    async def run() -> None:
        ended: list = []
        stream = start([None, None], ended)
        post(stream, 0, [Chunk("a", [97], [False])])
        lost = APIError(503, "lost", code="rpc_server_lost")
        stream.fail(lost)
        post(stream, 1, [Chunk("late", [1], [False]), None])  # the engine's late word changes nothing
        await asyncio.sleep(0.01)
        assert stream.done and [e for _, _, e in ended] == [lost, lost]
        with pytest.raises(APIError, match="lost"):
            [e async for e in stream]

    asyncio.run(run())


@pytest.mark.parametrize("asked", [True, False])
def test_a_prompts_progress_is_an_event_only_for_a_request_that_asked(asked):
    async def run() -> list:
        stream = start([None], [], progress=asked)
        post(stream, 0, [
            Progress(300, 100, 100, 0), Progress(300, 100, 228, 40), Progress(300, 100, 300, 70),
            Chunk("A", [65], [False]), Chunk("", [], [], response("A", [65])), None,
        ])  # fmt: skip
        await asyncio.sleep(0.01)
        return [e async for e in stream]

    got = asyncio.run(run())
    shown = [e for e in got if isinstance(e, events.Progress)]
    if asked:  # llama-server's prompt_progress, in order, before the answer
        assert [(p.total, p.cache, p.processed, p.time_ms) for p in shown] == [
            (300, 100, 100, 0), (300, 100, 228, 40), (300, 100, 300, 70),
        ]  # fmt: skip
        assert got.index(shown[-1]) < next(i for i, e in enumerate(got) if isinstance(e, Delta))
    else:
        assert shown == []
    assert isinstance(got[-1], Finished) and got[-1].message.content == "A"
