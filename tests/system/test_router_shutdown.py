"""A SIGTERM to a router answers a whole request in flight in its dialect's shape (issue 60, #6):
`_wind_down` called a `Served.wind_down` that did not exist, so every router shutdown logged a
traceback and the client got a plain-text 500 after uvicorn's timeout (21 s). Now the request gets
the grace, then a 503 in OpenAI's shape, and the router exits 0 with a clean log. SmolLM2 alone in
a models folder, in a process of its own."""

from __future__ import annotations

import signal
import threading
import time

import httpx

from tests.helpers import Server


def test_sigterm_answers_a_whole_request_in_flight_in_a_router(smollm2_path, tmp_path):
    (tmp_path / "smol").mkdir()
    (tmp_path / "smol" / smollm2_path.name).symlink_to(smollm2_path)
    srv = Server(tmp_path, "--n-ctx", "4096", "--n-threads", "1", "--no-log")
    body = {
        "model": "smol",
        "prompt": "Once upon a time",
        "max_tokens": 4000,
        "logit_bias": {"0": -100, "2": -100},
    }
    done: dict = {}
    worker = threading.Thread(
        target=lambda: done.update(r=httpx.post(srv.url + "/v1/completions", json=body, timeout=300)),
        daemon=True,
    )
    worker.start()
    deadline = time.monotonic() + 240  # the model's process loads first
    while srv.health().get("running", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert srv.health().get("running", 0) >= 1, srv.health()
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    worker.join(60)
    r = done["r"]
    assert r.status_code == 503 and r.headers["content-type"].startswith("application/json"), r.text
    assert "shutting down" in r.json()["error"]["message"], r.text
    assert time.monotonic() - t0 < 14
    assert srv.stop() == 0
    assert "Traceback" not in srv.output(), srv.output()[-3000:]
