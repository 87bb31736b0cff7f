"""Streams that survive a long prefill, on the fake engine: every dialect's first event goes out at
once, a silence past --stream-keepalive is filled with the dialect's own keepalive (timed here on
framing's pacing itself), and return_progress gives llama-server's prompt_progress."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.server import create_app
from localspec.server.framing import _paced
from localspec.serving.events import Progress

from ..fake_engine import FakeModel, Pause, answer

HI = [{"role": "user", "content": "Hi"}]
EVERY = 0.05  # the keepalive interval the app runs with
SILENCE = 0.4  # a "prefill" eight intervals long


@pytest.fixture()
def fake():
    return FakeModel()


@pytest.fixture()
def client(fake):
    app = create_app(Settings(parallel=4, stream_keepalive=EVERY), model=fake)
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def sse_events(text: str) -> list[tuple[str, str]]:
    """Each SSE event as (its event name, or "comment", or "data"; its payload), in order."""
    out = []
    for block in text.split("\n\n"):
        lines = [x for x in block.splitlines() if x]
        if not lines:
            continue
        if lines[0].startswith(":"):
            out.append(("comment", lines[0][1:].strip()))
            continue
        name = next((x[7:] for x in lines if x.startswith("event: ")), "data")
        out.append((name, next(x[6:] for x in lines if x.startswith("data: "))))
    return out


# -- framing's pacing, timed ---------------------------------------------------------------------
async def _timed(frames, every):
    t0, out = time.monotonic(), []
    async for f in _paced(frames, lambda: "keepalive", every):
        out.append((f, time.monotonic() - t0))
    return out


async def _slow():
    yield "first"
    await asyncio.sleep(SILENCE)
    yield "answer"


def test_a_silence_is_filled_with_keepalives_closer_together_than_the_interval():
    got = asyncio.run(_timed(_slow(), EVERY))
    kinds = [f for f, _ in got]
    assert kinds[0] == "first" and kinds[-1] == "answer"
    assert set(kinds[1:-1]) == {"keepalive"} and len(kinds) - 2 >= SILENCE / EVERY - 2
    gaps = [b - a for (_, a), (_, b) in zip(got, got[1:])]
    assert max(gaps) < EVERY * 2.5, gaps  # never silent for much longer than the interval


def test_no_interval_means_no_keepalive():
    assert [f for f, _ in asyncio.run(_timed(_slow(), 0))] == ["first", "answer"]


def test_leaving_while_a_frame_is_being_made_stops_making_it():
    ended = []

    async def frames():
        try:
            yield "first"
            await asyncio.sleep(10)
            yield "never"
        finally:
            ended.append(True)

    async def run():
        paced = _paced(frames(), lambda: "keepalive", EVERY)
        assert await paced.__anext__() == "first"
        assert await paced.__anext__() == "keepalive"  # the second frame is being made meanwhile
        await paced.aclose()
        await asyncio.sleep(0)  # the cancelled making runs its clean-up
        await asyncio.sleep(0)

    asyncio.run(run())
    assert ended == [True]


# -- each dialect: its first event at once, its own keepalive in the silence -----------------------
def test_chat_completions_send_the_first_chunk_then_comments(client, fake):
    fake.queue(Pause(SILENCE), *answer("Hi"))
    got = sse_events(client.post("/v1/chat/completions", json={"messages": HI, "stream": True}).text)
    assert got[0][0] == "data" and json.loads(got[0][1])["choices"][0]["delta"]["role"] == "assistant"
    first_text = next(i for i, (k, d) in enumerate(got) if k == "data" and '"content":"H' in d)
    assert [k for k, _ in got[1:first_text]] == ["comment"] * (first_text - 1) and first_text >= 4
    assert got[-1] == ("data", "[DONE]")


def test_responses_send_created_and_in_progress_then_in_progress_again(client, fake):
    fake.queue(Pause(SILENCE), *answer("Hi"))
    got = sse_events(client.post("/v1/responses", json={"input": "Hi", "stream": True}).text)
    names = [k for k, _ in got]
    assert names[:2] == ["response.created", "response.in_progress"]
    added = names.index("response.output_item.added")
    assert set(names[2:added]) == {"response.in_progress"} and added >= 5
    seqs = [json.loads(d)["sequence_number"] for _, d in got]
    assert seqs == list(range(len(seqs))) and names[-1] == "response.completed"
    assert all(json.loads(d)["response"]["status"] == "in_progress" for _, d in got[1:added])


def test_messages_send_message_start_then_pings(client, fake):
    fake.queue(Pause(SILENCE), *answer("Hi"))
    body = {"max_tokens": 8, "messages": HI, "stream": True}
    got = sse_events(client.post("/v1/messages", json=body).text)
    names = [k for k, _ in got]
    assert names[0] == "message_start"
    block = names.index("content_block_start")
    assert set(names[1:block]) == {"ping"} and block >= 4
    assert all(json.loads(d) == {"type": "ping"} for k, d in got if k == "ping")
    assert names[-1] == "message_stop"


@pytest.mark.parametrize("path, body, text", [
    ("/api/chat", {"messages": HI}, lambda x: x["message"]["content"]),
    ("/api/generate", {"prompt": "Hi"}, lambda x: x["response"]),
])  # fmt: skip
def test_ollama_sends_an_empty_line_at_once_and_while_silent(client, fake, path, body, text):
    fake.queue(Pause(SILENCE), *answer("Hi"))
    got = [json.loads(x) for x in client.post(path, json={"model": "m", **body}).text.splitlines() if x]
    first_text = next(i for i, x in enumerate(got) if text(x))
    assert first_text >= 4 and all(text(x) == "" and x["done"] is False for x in got[:first_text])
    assert "".join(text(x) for x in got) == "Hi" and got[-1]["done"] is True


def test_a_stream_that_is_never_silent_has_no_keepalive(client, fake):
    fake.queue(*answer("Hello there", pieces=5))
    got = sse_events(client.post("/v1/messages", json={"max_tokens": 8, "messages": HI, "stream": True}).text)
    assert [k for k, _ in got].count("ping") == 1  # the one Anthropic's own streams send after message_start


# -- llama-server's prompt progress ------------------------------------------------------------------
PROGRESS = [Progress(0, 300, 100, 100, 0), Progress(0, 300, 100, 300, 70)]
SHOWN = [{"total": 300, "cache": 100, "processed": 100, "time_ms": 0},
         {"total": 300, "cache": 100, "processed": 300, "time_ms": 70}]  # fmt: skip


def test_chat_and_completions_stream_prompt_progress_when_asked(client, fake):
    fake.queue(*PROGRESS, *answer("Hi"))
    body = {"messages": HI, "stream": True, "return_progress": True}
    chunks = [json.loads(d) for k, d in sse_events(client.post("/v1/chat/completions", json=body).text)
              if k == "data" and d != "[DONE]"]  # fmt: skip
    shown = [c for c in chunks if "prompt_progress" in c]
    assert [c["prompt_progress"] for c in shown] == SHOWN and fake.requests[-1].progress
    assert all(c["choices"][0]["delta"] == {"role": "assistant"} for c in shown)  # as llama-server's
    assert "prompt_progress" not in chunks[-1]
    fake.queue(*PROGRESS, *answer("Hi"))
    body = {"prompt": "Hi", "stream": True, "return_progress": True}
    chunks = [json.loads(d) for k, d in sse_events(client.post("/v1/completions", json=body).text)
              if k == "data" and d != "[DONE]"]  # fmt: skip
    assert [c["prompt_progress"] for c in chunks if "prompt_progress" in c] == SHOWN


def test_responses_carry_prompt_progress_on_in_progress_events(client, fake):
    fake.queue(*PROGRESS, *answer("Hi"))
    body = {"input": "Hi", "stream": True, "return_progress": True}
    got = sse_events(client.post("/v1/responses", json=body).text)
    shown = [json.loads(d) for k, d in got if k == "response.in_progress" and "prompt_progress" in d]
    assert [e["prompt_progress"] for e in shown] == SHOWN


def test_progress_is_asked_only_by_a_stream_that_says_so(client, fake):
    client.post("/v1/chat/completions", json={"messages": HI, "stream": True})
    client.post("/v1/chat/completions", json={"messages": HI, "return_progress": True})
    assert [r.progress for r in fake.requests] == [False, False]
