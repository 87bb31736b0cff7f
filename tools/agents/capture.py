"""A recording proxy between an agent and its server: each POST body the agent sends is saved as
it was sent (NNN-<path>.json, in order), and the request goes on to the server unchanged, its
answer streamed back as it comes. What the model was asked, exactly, for comparing renders
(tools/agents/peer_prompt.py) and replaying turns.

    python -m tools.agents ... --capture DIR     (the harness puts it in front of the server)"""

from __future__ import annotations

import itertools
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


def app(upstream: str, folder: Path) -> Starlette:
    folder.mkdir(parents=True, exist_ok=True)
    count = itertools.count(len(list(folder.glob("*.json"))))
    client = httpx.AsyncClient(base_url=upstream, timeout=None)

    async def forward(request: Request) -> StreamingResponse:
        body = await request.body()
        if request.method == "POST":
            name = re.sub(r"[^a-z0-9]+", "_", request.url.path.lower()).strip("_")
            (folder / f"{next(count):03d}-{name}.json").write_bytes(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        req = client.build_request(
            request.method, request.url.path, params=request.query_params, headers=headers, content=body
        )
        resp = await client.send(req, stream=True)
        out = {k: v for k, v in resp.headers.items() if k.lower() not in HOP | {"content-encoding"}}
        return StreamingResponse(
            resp.aiter_raw(), resp.status_code, out, background=BackgroundTask(resp.aclose)
        )

    methods = ["GET", "POST", "HEAD", "DELETE", "PUT"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


def start(upstream: str, folder: Path) -> str:
    """The proxy on a free local port, in a daemon thread; its url."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(upstream, folder), port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}"
