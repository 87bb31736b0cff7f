"""`localspec serve` on a target split over an rpc-server that drops mid-stream (issue #19): the
requests in flight get a 503 in OpenAI's shape, the server re-executes itself, waits for the
rpc-server, and answers again once it is back (server/reload.py)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import httpx
import openai
import pytest

from ..helpers import Server
from ..rpc_servers import Servers, need_rpc

KEY = "sk-rpc-test-key"


def _until(what: Callable[[], bool], timeout: float, srv: Server, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            pytest.fail(f"{why} within {timeout:g} s:\n{srv.output()}")
        time.sleep(0.2)


def _healthy(srv: Server) -> bool:
    try:
        return httpx.get(srv.url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_lost_rpc_server_fails_the_requests_in_flight_and_the_server_comes_back(smollm2_path):
    servers = Servers(need_rpc(), n=2)  # one killed; the other must be let go of
    srv = None
    try:
        srv = Server(
            smollm2_path, "--rpc", servers.rpc, "--parallel", "2", "--n-threads", "1", "--api-key", KEY
        )
        pid = srv.proc.pid
        client = srv.client(KEY)
        model = client.models.list().data[0].id
        stream = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=900, stream=True)
        assert next(iter(stream)).choices  # generating
        with ThreadPoolExecutor(1) as pool:
            plain = pool.submit(client.completions.create, model=model, prompt="Once upon", max_tokens=900)
            _until(lambda: srv.health(KEY)["running"] == 2, 10, srv, "the second request did not start")
            servers.kill(1)
            t0 = time.monotonic()
            with pytest.raises(openai.APIError, match="lost an rpc-server"):  # the stream's last event
                for _ in stream:
                    pass
            with pytest.raises(openai.APIStatusError) as e:
                plain.result(timeout=30)
        assert time.monotonic() - t0 < 15
        assert e.value.status_code == 503 and e.value.response.headers["retry-after"]
        assert e.value.body["type"] == "server_error" and e.value.body["code"] == "rpc_server_lost"
        # the same process, re-executed, says once that it waits for the rpc-server
        _until(lambda: "waiting for the rpc-servers" in srv.output(), 30, srv, "no line about waiting")
        assert srv.proc.poll() is None and srv.proc.pid == pid
        time.sleep(2 * 2.0)  # a few failed probes: still one line
        assert srv.output().count("waiting for the rpc-servers") == 1
        servers.restart(1)
        _until(lambda: _healthy(srv), 60, srv, "the server did not come back")
        again = client.completions.create(model=model, prompt="Once upon a time", max_tokens=8)
        assert again.choices[0].text and again.usage.completion_tokens == 8
        # the re-executed server has the key in its environment, not on a command line `ps` shows (#28)
        assert KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert f"LOCALSPEC_API_KEY={KEY}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        out = srv.output()
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: lost the connection to rpc-server at"), out
        assert "Traceback" not in out and "GGML" not in out
        assert srv.stop() == 0, srv.output()
    finally:
        if srv is not None:
            srv.stop()
        servers.close()
