"""What every dialect shares: the unknown-field policy, the error shape chosen by path, and the
NDJSON framing (SSE's is exercised by the OpenAI dialects' tests)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import ClassVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient
from pydantic import BaseModel

from localspec.config.settings import Settings
from localspec.server import framing
from localspec.server.errors import Shapes
from localspec.server.fields import Checked, unsupported
from localspec.serving import APIError, Delta

from ..fake_engine import FakeStream, answer


class Block(Checked):
    IGNORED: ClassVar[frozenset[str]] = frozenset({"cache_control"})
    text: str


class Loose(BaseModel):  # a model that is not Checked ignores its extras, but its children are read
    blocks: list[Block]


class Body(Checked):
    IGNORED: ClassVar[frozenset[str]] = frozenset({"metadata"})
    messages: list[Loose]


def test_unknown_fields_are_named_by_their_path_unless_ignored():
    ok = {"messages": [{"blocks": [{"text": "a", "cache_control": {}}], "x": 1}], "metadata": {}}
    assert unsupported(Body.model_validate(ok)) is None
    bad = {"messages": [{"blocks": [{"text": "a"}, {"text": "b", "citations": []}]}]}
    assert unsupported(Body.model_validate(bad)) == "messages.0.blocks.1.citations"
    assert unsupported(Body.model_validate({"messages": [], "thinking": {}})) == "thinking"


def test_the_error_shape_follows_the_path():
    def shape(name: str):
        return lambda e: name

    router = APIRouter()
    router.add_api_route("/v1/messages", lambda: None, methods=["POST"])
    anthropic = SimpleNamespace(router=router, error_response=shape("anthropic"))
    ollama = SimpleNamespace(router=APIRouter(), error_response=shape("ollama"), PREFIX="/api/")
    shapes = Shapes([anthropic, ollama], default=shape("openai"))
    assert [shapes(p)(None) for p in ("/v1/messages", "/api/nothing", "/v1/nothing")] == [
        "anthropic", "ollama", "openai",
    ]  # fmt: skip


def test_ndjson_lines_end_with_the_dialects_error():
    app = FastAPI()
    app.state.settings = Settings()  # its --stream-keepalive
    streams = []

    @app.post("/lines")
    async def lines(request: Request) -> object:
        stream = FakeStream([*answer("ab", pieces=2)[:1], APIError(500, "boom")])
        streams.append(stream)

        async def out():
            async for e in stream:
                if isinstance(e, Delta):
                    yield {"content": e.content}

        return framing.ndjson(request, stream, out(), lambda err: {"error": err.message}, dict)

    with TestClient(app) as client:
        r = client.post("/lines")
        assert r.headers["content-type"].startswith("application/x-ndjson")
        assert [json.loads(line) for line in r.text.splitlines()] == [{"content": "a"}, {"error": "boom"}]
        assert streams[0].cancelled
