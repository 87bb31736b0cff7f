"""A request's images are decoded and cut on the bulk thread, in its turns (issue 60): two 4096² PNGs
cost 0.5 s of PNG decoding and 0.25 s of the projector's resize, and three clients sending them from
workers of their own took a decoding neighbour to 0.07 of its speed. In-process on SmolLM2 with the
test projector, so the decode can be watched."""

from __future__ import annotations

import base64
import threading
import time

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.server import create_app
from localspec.serving import bulk, plan

from ..helpers import png


@pytest.fixture(scope="module")
def client(smollm2_path, mmproj_path):
    s = Settings(target=smollm2_path, mmproj=mmproj_path, n_ctx=512, parallel=2, temperature=0, no_log=True)
    with TestClient(create_app(s, lambda: Engine(s)), base_url="http://localhost") as c:
        yield c


def chat(client: TestClient, image: bytes):  # noqa: ANN201
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe."}]
    return client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": content}],
                                                     "max_tokens": 2})  # fmt: skip


def test_images_are_decoded_on_the_bulk_thread_in_its_turn(client, monkeypatch):
    threads: list[str] = []
    decode = plan.decode_image
    monkeypatch.setattr(
        plan, "decode_image", lambda *a: threads.append(threading.current_thread().name) or decode(*a)
    )
    turns = bulk._Turns()
    turns.credit = -0.5 * bulk.SHARE  # a flood of bulk work overdrew it: zero again 0.5 s from now
    monkeypatch.setattr(bulk, "_turns", turns)
    t0 = time.monotonic()
    r = chat(client, png(7))
    assert r.status_code == 200, r.text[:300]
    assert threads and all(t.startswith("localspec-bulk") for t in threads), threads
    assert time.monotonic() - t0 >= 0.45, "the image was decoded before the bulk work's turn"
    turns.credit = -2 * bulk.SHARE  # a request without images is not held by the bulk work's turns
    t0 = time.monotonic()
    r = client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    )
    assert r.status_code == 200 and len(threads) == 1 and time.monotonic() - t0 < 1.5
