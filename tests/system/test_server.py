"""`localspec serve` as a real process on loopback, driven by the official `openai` client.

SmolLM2 drafts for itself (~100% acceptance, fast; a fixed K, so the tuner never turns drafting off), so outputs are deterministic at temperature 0
and the speculative counters are non-trivial.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from ..helpers import SERVER_N_CTX, Server, logged

ROOT = Path(__file__).resolve().parents[2]
KEY = "sekret-test-key"


@pytest.fixture(scope="module")
def server(smollm2_path):
    srv = Server(smollm2_path, "--parallel", "4")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def strict(smollm2_path):
    """One slot, no queue, an API key and a small body limit."""
    srv = Server(smollm2_path, "--parallel", "1", "--max-queue", "0", "--api-key", KEY, "--max-body", "4000")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def model_id(server) -> str:
    return server.client().models.list().data[0].id


CHAT = [{"role": "user", "content": "Name three colours of the rainbow."}]


def test_models_and_health(server, smollm2_path):
    models = server.client().models.list().data
    assert [m.id for m in models] == [smollm2_path.stem]
    assert server.health()["status"] == "ok"


def test_completion_usage_and_timings(server, model_id, smollm2):
    prompt = "The capital of France is"
    r = server.client().completions.create(model=model_id, prompt=prompt, max_tokens=12, temperature=0)
    assert r.choices[0].text.strip()
    assert r.usage.prompt_tokens == len(smollm2.tokenize(prompt, add_special=True, parse_special=False))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if r.choices[0].finish_reason == "length":
        assert r.usage.completion_tokens == 12
    t = r.model_extra["timings"]
    assert t["predicted_n"] == r.usage.completion_tokens and t["prompt_n"] == r.usage.prompt_tokens
    assert t["speculative"] and 0 < t["draft_n_accepted"] <= t["draft_n"]
    assert t["acceptance_rate"] > 0.8  # a model drafting for itself
    assert t["k_history"] and t["acceptance_by_pos"] and t["mean_accepted_len"] > 0
    # the acceptance log has this request's line (conftest points the state directory at a temp dir)
    log = Path(os.environ["XDG_STATE_HOME"]) / "localspec" / "acceptance.jsonl"
    mine = logged(log, lambda r: r["source"] == "server" and r["seed"] == t["seed"])
    assert len(mine) == 1 and mine[0]["stats"]["n_accepted"] == t["draft_n_accepted"]
    assert mine[0]["settings"]["temperature"] == 0


def test_streamed_chat_equals_non_streamed(server, model_id):
    client = server.client()
    whole = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=40, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model=model_id, messages=CHAT, max_tokens=40, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text.strip()
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage  # the include_usage chunk
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].model_extra["timings"]["draft_n"] > 0  # stats ride on the finishing chunk


def test_stop_string(server, model_id):
    client = server.client()
    full = client.completions.create(model=model_id, prompt="Count: 1, 2, 3,", max_tokens=24, temperature=0)
    text = full.choices[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert len(stop) == 3
    cut = client.completions.create(
        model=model_id, prompt="Count: 1, 2, 3,", max_tokens=24, temperature=0, stop=[stop]
    )
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_stream_marks_accepted_drafts(server, model_id):
    stream = server.client().chat.completions.create(
        model=model_id, messages=CHAT, max_tokens=24, temperature=0, stream=True,
        extra_body={"localspec": {"mark_drafts": True}},
    )  # fmt: skip
    marks = [c.model_extra["localspec"] for c in stream if c.choices and c.choices[0].delta.content]
    assert marks and all(len(m["from_draft"]) >= 1 for m in marks)
    flags = [f for m in marks for f in m["from_draft"]]
    assert any(flags)  # self-drafting: most text was drafted and accepted
    assert all(m["all_draft"] == all(m["from_draft"]) for m in marks)


def test_eight_clients_at_once_match_serial(server, model_id, smollm2):
    """All succeed, and each concurrent answer equals its serial one up to llama.cpp's batch
    non-invariance: where they differ, every token of both is the target's own greedy choice within
    a near-tie margin (teacher-forced over the model alone)."""
    from localspec.chat import template as chat
    from localspec.llama import Context

    from ..helpers import MARGIN

    client = server.client()
    questions = [[{"role": "user", "content": f"One fact about the number {i}?"}] for i in range(8)]

    def ask(msgs: list[dict]) -> str:
        r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=12, temperature=0)
        return r.choices[0].message.content

    def gaps(msgs: list[dict], text: str) -> list[float]:
        prompt = chat.prompt_tokens(smollm2, msgs)
        out = smollm2.tokenize(text, add_special=False, parse_special=False)
        with Context(smollm2, n_ctx=512) as ctx:
            rows = ctx.eval(prompt + out[:-1], 0, len(out))
            return [float(row.max() - row[t]) for row, t in zip(rows, out)]

    serial = [ask(m) for m in questions]
    with ThreadPoolExecutor(8) as pool:
        concurrent = list(pool.map(ask, questions))
    assert all(concurrent) and sum(a == b for a, b in zip(concurrent, serial)) >= 4
    for msgs, a, b in zip(questions, concurrent, serial):
        if a != b:
            assert max(gaps(msgs, a)) <= MARGIN and max(gaps(msgs, b)) <= MARGIN, (a, b)


def test_client_closing_stream_frees_server(server, model_id):
    client = server.client()
    before = server.metrics()["localspec:requests_cancelled_total"]
    stream = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=900, stream=True)
    got = [next(iter(stream)) for _ in range(3)]
    assert got
    stream.close()
    t0 = time.monotonic()
    while server.health()["running"] and time.monotonic() - t0 < 1.0:
        time.sleep(0.05)
    assert server.health()["running"] == 0, "the cancelled generation still holds the engine"
    r = client.completions.create(model=model_id, prompt="Hello", max_tokens=4, temperature=0)
    assert r.choices[0].text is not None
    assert server.metrics()["localspec:requests_cancelled_total"] == before + 1


def test_a_client_leaving_during_a_long_prefill_frees_the_server_at_once(smollm2_path):
    """An agent's 10k-token prompt alone was prefilled in one step: a client that gave up meanwhile
    held the engine until the whole prefill was done. It is prefilled a batch (--n-batch) a round,
    and a stream closed before its first token is cancelled between two batches."""
    srv = Server(smollm2_path, "--n-ctx", "4096", "--n-batch", "64", "--n-threads", "1", "--parallel", "1")
    try:
        words = " ".join(f"item{i}" for i in range(900))  # ~3.5k tokens: seconds on one thread
        body = {"messages": [{"role": "user", "content": words}], "max_tokens": 8, "stream": True}
        with pytest.raises(httpx.ReadTimeout):
            with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=1.0) as r:
                assert r.status_code == 200
                for _ in r.iter_lines():
                    pass
        t0 = time.monotonic()
        while srv.health()["running"] and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        freed_after = time.monotonic() - t0
        assert srv.metrics()["localspec:requests_cancelled_total"] == 1
        assert freed_after < 1.5, (
            f"the engine went on prefilling for {freed_after:.1f} s after the client left"
        )
    finally:
        srv.stop()


def test_bad_requests_get_openai_errors(server, model_id):
    client = server.client()
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt="word " * 2000, max_tokens=8)
    assert e.value.status_code == 400
    message = e.value.body["message"]
    n_prompt = int(message.split("prompt (")[1].split(" tokens")[0])
    assert (
        n_prompt > SERVER_N_CTX
        and str(SERVER_N_CTX) in message
        and e.value.body["code"] == "context_length_exceeded"
    )
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=CHAT, n=5)  # more choices than --parallel 4
    assert e.value.body["param"] == "n" and "--parallel (4)" in e.value.body["message"]
    # any name is the one model (docs/serving.md, "Model names"), as llama-server serves it
    assert client.chat.completions.create(model="gpt-4o", messages=CHAT, max_tokens=1).model == model_id
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model_id, messages=CHAT, temperature=-1)
    with pytest.raises(openai.BadRequestError) as e:  # it once overflowed a logit to inf: NaN sampling
        client.chat.completions.create(model=model_id, messages=CHAT, extra_body={"repeat_penalty": 1e-39})
    assert "repeat_penalty must be >= 0.01" in e.value.body["message"]
    r = httpx.post(
        server.url + "/v1/chat/completions",
        content=b'{"messages": [',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_metrics_count_what_was_sent(server, model_id):
    before = server.metrics()
    client = server.client()
    replies = [
        client.completions.create(model=model_id, prompt=p, max_tokens=10, temperature=0)
        for p in ("Roses are red,", "In 1492 Columbus")
    ]
    after = server.metrics()

    def delta(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert delta("vllm:prompt_tokens_total") == sum(r.usage.prompt_tokens for r in replies)
    assert delta("llamacpp:prompt_tokens_total") == sum(r.usage.prompt_tokens for r in replies)
    assert delta("vllm:generation_tokens_total") == sum(r.usage.completion_tokens for r in replies)
    assert delta("llamacpp:tokens_predicted_total") == sum(r.usage.completion_tokens for r in replies)
    drafted = sum(r.model_extra["timings"]["draft_n"] for r in replies)
    accepted = sum(r.model_extra["timings"]["draft_n_accepted"] for r in replies)
    assert drafted > 0
    assert delta("vllm:spec_decode_num_draft_tokens_total") == drafted == delta("llamacpp:n_drafted_total")
    assert delta("vllm:spec_decode_num_accepted_tokens_total") == accepted
    per_pos = sum(v for k, v in after.items() if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos"))
    per_pos -= sum(
        v for k, v in before.items() if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos")
    )
    assert per_pos == accepted
    # the target evaluated what it had not cached; the draft model (its cache holds a prefix of the
    # target's) at least that much, at most the whole prompt, of each prompt it drafted for
    new = [r.usage.prompt_tokens - r.model_extra["timings"]["cache_n"] for r in replies]
    assert delta("localspec:prompt_tokens_evaluated_total{role=target}") == sum(new)
    by_draft = [bool(r.model_extra["timings"]["draft_sources"].get("draft")) for r in replies]
    draft_new = sum(n for n, d in zip(new, by_draft) if d)
    draft_all = sum(r.usage.prompt_tokens for r, d in zip(replies, by_draft) if d)
    assert draft_new <= delta("localspec:prompt_tokens_evaluated_total{role=draft}") <= draft_all
    finished = sum(delta(f"vllm:request_success_total{{finished_reason={r}}}") for r in ("stop", "length"))
    assert finished == 2
    assert after["vllm:num_requests_running"] == 0 and after["llamacpp:predicted_tokens_seconds"] > 0


def test_auth_and_body_limit(strict):
    with pytest.raises(openai.AuthenticationError):
        strict.client().models.list()
    with pytest.raises(openai.AuthenticationError):
        strict.client("wrong").models.list()
    assert strict.client(KEY).models.list().data
    assert httpx.get(strict.url + "/health").status_code == 200  # open, for load balancers
    assert httpx.get(strict.url + "/metrics").status_code == 401
    big = {"prompt": "x" * 5000, "max_tokens": 1}
    r = httpx.post(strict.url + "/v1/completions", json=big, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_full_queue_answers_503(strict):
    client = strict.client(KEY)
    model = client.models.list().data[0].id
    busy = client.completions.create(model=model, prompt="Once upon a time", max_tokens=900, stream=True)
    next(iter(busy))  # the only slot is taken
    try:
        with pytest.raises(openai.APIStatusError) as e:
            client.completions.create(model=model, prompt="Hi", max_tokens=2)
        assert e.value.status_code == 503 and e.value.response.headers["retry-after"]
        assert e.value.body["type"] == "server_error"
    finally:
        busy.close()
    t0 = time.monotonic()
    while strict.health(KEY)["running"] and time.monotonic() - t0 < 2:
        time.sleep(0.05)
    assert client.completions.create(model=model, prompt="Hi", max_tokens=2).choices
    assert strict.metrics({"authorization": f"Bearer {KEY}"})["localspec:requests_rejected_total"] == 1


def test_sigterm_mid_stream_exits_0(smollm2_path):
    srv = Server(smollm2_path)
    stream = srv.client().completions.create(
        model=smollm2_path.stem, prompt="Once upon a time", max_tokens=900, stream=True
    )
    next(iter(stream))
    t0 = time.monotonic()
    assert srv.stop() == 0, srv.output()
    assert time.monotonic() - t0 < 20
    with pytest.raises(openai.APIError, match="shutting down"):  # the stream ends with a reason
        for _ in stream:
            pass
    assert "Traceback" not in srv.output() and "ERROR" not in srv.output()


def test_sigterm_answers_a_whole_request_in_flight_in_its_shape(smollm2_path):
    """A non-streamed request in flight waited out uvicorn's graceful shutdown (10 s), then got a
    plain-text 500 and the log an 80-line traceback (#48). It gets the grace, then a 503 in
    OpenAI's shape, and the server exits 0 with a clean log."""
    srv = Server(smollm2_path, "--n-ctx", "4096", "--n-threads", "1", "--no-log")
    body = {"prompt": "Once upon a time", "max_tokens": 4000, "logit_bias": {"0": -100, "2": -100}}
    done: dict = {}
    worker = threading.Thread(
        target=lambda: done.update(r=httpx.post(srv.url + "/v1/completions", json=body, timeout=60)),
        daemon=True,
    )
    worker.start()
    deadline = time.monotonic() + 30
    while srv.health()["running"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    worker.join(40)
    r = done["r"]
    assert r.status_code == 503 and r.headers["content-type"].startswith("application/json"), r.text
    assert "shutting down" in r.json()["error"]["message"] and r.json()["error"]["type"] == "server_error"
    assert time.monotonic() - t0 < 14
    assert srv.stop() == 0
    assert "Traceback" not in srv.output(), srv.output()[-3000:]
