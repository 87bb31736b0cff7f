"""What Ollama's clients ask about models: GET /api/tags (what is here), POST /api/show (one
model's facts: Continue and Zed read its context length there), GET /api/ps (what is loaded),
GET /api/version (Open WebUI checks a connection with it). The served model is listed as
NAME:latest, Ollama's default tag, and found by either name. Calls that manage model files (pull,
push, create, copy, delete, blobs) are answered with the localspec command that does the job."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, Request

from localspec import __version__
from localspec.server import offload
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.fields import refuse_unsupported
from localspec.server.ollama import errors
from localspec.server.ollama import schemas as s
from localspec.server.ollama.chat import model_name
from localspec.serving import ModelCard
from localspec.serving.errors import APIError

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response
PREFIX = "/api/"
# the Ollama release whose API this one follows (clients compare it to decide what to send)
OLLAMA_VERSION = "0.12.0"
NEVER = "9999-12-31T23:59:59Z"  # the loaded model does not expire
MANAGED = {
    "pull": "download a pair with `localspec pull NAME` (or `localspec models` for the embedded one)",
    "push": "localspec does not publish models; a pair is a folder you can copy",
    "create": "build a pair with `localspec pair TARGET DRAFT --out-dir DIR`; its settings go in pair.toml",
    "copy": "a pair is a folder: copy it",
    "delete": "a pair is a folder: delete it (`localspec list` shows where each one is)",
    "blobs": "build a pair with `localspec pair TARGET DRAFT --out-dir DIR`",
}


@router.get("/api/version")
async def version() -> dict[str, str]:
    return {"version": OLLAMA_VERSION, "localspec": __version__}


@router.get("/api/tags")
async def tags(request: Request) -> dict[str, Any]:
    return {"models": [_listed(m.card) for m in models_of(request)]}


for _path, _call in (("/api/version", version), ("/api/tags", tags)):  # Ollama answers HEAD on both
    router.add_api_route(_path, _call, methods=["HEAD"], include_in_schema=False)


@router.get("/api/ps")
async def ps(request: Request) -> dict[str, Any]:
    """The models loaded now (a router's come and go), each with when it will be unloaded."""
    return {
        "models": [
            _listed(st.card)
            | {
                "expires_at": NEVER if st.expires_at is None else _iso(st.expires_at),
                "size_vram": 0,
                "context_length": st.card.n_ctx,
            }
            for st in models_of(request).status()
            if st.state == "loaded"
        ]
    }


@router.post("/api/show")
async def show(body: s.ShowRequest, request: Request) -> dict[str, Any]:
    refuse_unsupported(body)
    name = body.model or body.name
    if not name:
        raise APIError(400, "model is required", param="model")
    c = models_of(request).get(model_name(name)).card
    info = {
        "general.architecture": c.arch,
        "general.parameter_count": c.n_params,
        f"{c.arch}.context_length": c.n_ctx,  # what a request may use here, not what it was trained on
        f"{c.arch}.embedding_length": c.n_embd,
        "general.file_type": c.quantization,
    }
    return {
        "modelfile": f"# served by localspec\nFROM {c.target}\n",
        "parameters": "",
        "template": c.chat_template or "",
        "details": _details(c),
        "model_info": info,
        "capabilities": c.capabilities,
        "modified_at": _iso(c.created),
    }


def _refuse(call: str) -> Any:
    async def refuse() -> None:
        raise APIError(
            501,
            f"/api/{call} is not served: this server serves the model it was started with; {MANAGED[call]}",
        )

    return refuse


for _call in MANAGED:  # Ollama deletes with DELETE, checks a blob with HEAD, does the rest with POST
    _path = "/api/blobs/{digest}" if _call == "blobs" else f"/api/{_call}"
    router.add_api_route(_path, _refuse(_call), methods=["POST", "DELETE", "HEAD"], include_in_schema=False)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def _details(c: ModelCard) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": c.arch,
        "families": [c.arch] if c.arch else None,
        "parameter_size": _count(c.n_params),
        "quantization_level": c.quantization,
    }


def _count(n: int) -> str:
    """1.3B, 135M, 12K: as Ollama writes a parameter count."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}B" if unit == "B" else f"{n / size:.0f}{unit}"
    return str(n)


def _listed(c: ModelCard) -> dict[str, Any]:
    digest = hashlib.sha256(f"{c.target}:{c.size}:{c.draft}".encode()).hexdigest()
    return {
        "name": f"{c.name}:latest",
        "model": f"{c.name}:latest",
        "modified_at": _iso(c.created),
        "size": c.size,
        "digest": digest,
        "details": _details(c),
        "capabilities": c.capabilities,  # beyond Ollama's list: a client needs no /api/show per model
        "context_length": c.n_ctx,
    }
