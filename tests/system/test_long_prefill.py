"""Streams that survive a prefill longer than a client's idle timeout (issue 57): SmolLM2 served with
each prefill round made slower (LOCALSPEC_TEST_PREFILL_DELAY, a slow machine's long prompt) and a
short --stream-keepalive, against clients whose read timeout is shorter than the prefill. Real SDKs
(`openai`: chat completions and Responses; `anthropic`: Messages) with retries on get their answer
in one request, nothing cancelled; the gaps between what arrives stay under the timeout in every
dialect; a client that leaves during the prefill stops it at the next batch."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import openai
import pytest

from ..helpers import Server

anthropic = pytest.importorskip("anthropic")

DELAY_S = 0.4  # added to every prefill round (a batch of N_BATCH tokens)
N_BATCH = 32
KEEPALIVE_S = 0.3
TIMEOUT_S = 1.0  # the clients' read timeout: under the prefill, over the keepalive
SUCCESS = "vllm:request_success_total{finished_reason=%s}"
CANCELLED = "localspec:requests_cancelled_total"


@pytest.fixture(scope="module")
def server(smollm2_path):
    srv = Server(
        smollm2_path, "--n-ctx", "4096", "--n-batch", str(N_BATCH), "--parallel", "1", "--no-log",
        "--stream-keepalive", str(KEEPALIVE_S), "--max-tokens", "4", "--temperature", "0",
        env={"LOCALSPEC_TEST_PREFILL_DELAY": str(DELAY_S)},
    )  # fmt: skip
    yield srv
    srv.stop()


def long_prompt() -> str:
    """~300 tokens, new each time (a cached prefix would skip the prefill): 9+ batches, 3.6 s or more."""
    return f"[{uuid.uuid4().hex}] " + " ".join(f"item {i} is {i * 7 % 13}." for i in range(40)) + " Sum up."


def requests_done(srv: Server) -> tuple[float, float]:
    m = srv.metrics()
    return sum(m.get(SUCCESS % r, 0.0) for r in ("stop", "length", "context")), m.get(CANCELLED, 0.0)


def once(srv: Server, run) -> None:  # noqa: ANN001 - `run` is answered in one request, none cancelled
    done, cancelled = requests_done(srv)
    t0 = time.monotonic()
    run()
    assert time.monotonic() - t0 > 2 * TIMEOUT_S  # the prefill did outlast the clients' timeout
    assert requests_done(srv) == (done + 1, cancelled)  # no retry, nothing cut off


def test_the_openai_sdk_streams_chat_completions_through_the_prefill(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=2, timeout=TIMEOUT_S)

    def run() -> None:
        chunks = list(client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": long_prompt()}], stream=True
        ))  # fmt: skip
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
        assert chunks[-1].model_extra["timings"]["prompt_ms"] > 1e3 * TIMEOUT_S

    once(server, run)


def test_the_openai_sdk_streams_a_response_through_the_prefill(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=2, timeout=TIMEOUT_S)

    def run() -> None:
        events = list(
            client.responses.create(model="gpt-5", input=long_prompt(), stream=True, max_output_tokens=4)
        )
        kinds = [e.type for e in events]
        assert (
            kinds[:2] == ["response.created", "response.in_progress"]
            and kinds.count("response.in_progress") > 2
        )
        assert kinds[-1] in ("response.completed", "response.incomplete")

    once(server, run)


def test_the_anthropic_sdk_streams_a_message_through_the_prefill(server):
    client = anthropic.Anthropic(base_url=server.url, api_key="sk-local", max_retries=2, timeout=TIMEOUT_S)

    def run() -> None:
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=4, messages=[{"role": "user", "content": long_prompt()}]
        ) as stream:
            message = stream.get_final_message()
        assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.input_tokens > 200

    once(server, run)


DIALECTS = [
    ("/v1/chat/completions", lambda p: {"messages": [{"role": "user", "content": p}], "stream": True}),
    # Responses without max_output_tokens runs to the context's end (docs/apps.md), not --max-tokens
    ("/v1/responses", lambda p: {"input": p, "stream": True, "max_output_tokens": 4}),
    (
        "/v1/messages",
        lambda p: {"max_tokens": 4, "messages": [{"role": "user", "content": p}], "stream": True},
    ),
    ("/api/chat", lambda p: {"messages": [{"role": "user", "content": p}]}),
]


@pytest.mark.parametrize("path, body", DIALECTS, ids=[d[0] for d in DIALECTS])
def test_nothing_is_silent_for_longer_than_the_keepalive(server, path, body):
    t0 = time.monotonic()
    arrived = []
    with httpx.stream("POST", server.url + path, json={"model": "m", **body(long_prompt())},
                      timeout=httpx.Timeout(10, read=TIMEOUT_S)) as r:  # fmt: skip
        assert r.status_code == 200
        for line in r.iter_lines():
            if line:
                arrived.append((time.monotonic() - t0, line))
    times = [t for t, _ in arrived]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[0] < TIMEOUT_S and times[-1] > 2 * TIMEOUT_S, times  # the first at once; a long prefill
    # the keepalive comes from the event loop, whatever the engine thread is doing
    assert max(gaps) < TIMEOUT_S, gaps


def test_a_read_timeout_under_the_keepalive_does_fire(server):
    """The control: the same client with a read timeout shorter than the keepalive gives up."""
    body = {"messages": [{"role": "user", "content": long_prompt()}], "stream": True}
    with pytest.raises(httpx.ReadTimeout):
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body,
                          timeout=httpx.Timeout(10, read=KEEPALIVE_S / 3)) as r:  # fmt: skip
            for _ in r.iter_lines():
                pass


def test_a_client_that_leaves_during_the_prefill_stops_it_at_the_next_batch(server):
    prompt = long_prompt()
    body = {"messages": [{"role": "user", "content": prompt}], "stream": True, "return_progress": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=10) as r:
        progress = []
        for line in r.iter_lines():
            if line.startswith("data: ") and "prompt_progress" in line:
                progress.append(json.loads(line[6:])["prompt_progress"])
            if len(progress) == 3:  # two batches in: leave
                break
    left = time.monotonic()
    batch_s = (progress[2]["time_ms"] - progress[1]["time_ms"]) / 1e3  # what one batch takes here
    while server.health()["running"] and time.monotonic() - left < 60:
        time.sleep(0.02)
    assert time.monotonic() - left < 2 * batch_s + 0.5  # within a batch or so, not the whole prefill
    assert [p["processed"] for p in progress] == sorted(p["processed"] for p in progress)
    assert progress[0]["total"] > 200 and progress[-1]["processed"] < progress[0]["total"]
    # the slot holds what was evaluated before the cancel: the same prompt again finds only that much
    again = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": prompt}], "max_tokens": 1,
    }).json()  # fmt: skip
    assert again["timings"]["cache_n"] <= progress[-1]["processed"] + 2 * N_BATCH
