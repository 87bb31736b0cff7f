"""Refusals are paced (issue 60): three clients sending a request that is refused in a millisecond,
each again at once, sent hundreds a second and took a decoding neighbour to 0.33-0.45 of its speed.
Past a burst, a 4xx waits its turn before it is sent; other answers, /health's and a good request's,
never wait; --refusal-rate 0 turns it off."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.server import create_app
from localspec.server.pacing import BURST_S, MAX_WAIT_S, Pace, RefusalPacing

from ..fake_engine import FakeModel

BAD = {"content": b"{not json", "headers": {"content-type": "application/json"}}


def test_the_bucket_gives_a_burst_then_one_refusal_per_interval_and_refills():
    pace = Pace(10.0)
    burst = round(10 * BURST_S)
    assert [pace.wait_s(100.0) for _ in range(burst)] == [0.0] * burst
    assert [round(pace.wait_s(100.0), 3) for _ in range(3)] == [0.1, 0.2, 0.3]
    for _ in range(100):  # a flood: the wait stops at MAX_WAIT_S...
        wait = pace.wait_s(100.0)
    assert wait == MAX_WAIT_S
    assert pace.wait_s(100.0 + BURST_S + MAX_WAIT_S) == 0.0  # ...and so does the bucket's debt


@pytest.fixture()
def paced():
    app = create_app(Settings(parallel=4, refusal_rate=5), model=FakeModel())  # a burst of 10
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def test_past_the_burst_refusals_wait_and_health_and_good_requests_do_not(paced):
    burst = round(5 * BURST_S)
    t0 = time.monotonic()
    for _ in range(burst):
        assert paced.post("/v1/chat/completions", **BAD).status_code == 400
    assert time.monotonic() - t0 < burst * 0.2  # within the burst: none waited its 0.2 s turn
    waited: list[float] = []

    def refused() -> None:
        t = time.monotonic()
        r = paced.post("/v1/chat/completions", **BAD)
        assert r.status_code == 400 and r.json()["error"]["message"]  # the answer, unchanged
        waited.append(time.monotonic() - t)

    sender = threading.Thread(target=lambda: [refused() for _ in range(3)])
    sender.start()
    time.sleep(0.05)
    t = time.monotonic()
    assert paced.get("/health").status_code == 200
    good = paced.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert good.status_code == 200 and time.monotonic() - t < 0.15, "a good answer waited"
    sender.join()
    assert sum(waited) >= 0.4, waited  # 0.2 s each, less what refilled while the burst was sent


def test_a_rate_of_zero_paces_nothing():
    app = create_app(Settings(parallel=4, refusal_rate=0), model=FakeModel())
    assert not any(m.cls is RefusalPacing for m in app.user_middleware)
    assert any(m.cls is RefusalPacing for m in create_app(Settings(), model=FakeModel()).user_middleware)
