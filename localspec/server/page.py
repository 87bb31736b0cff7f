"""The chat page: `GET /` from a browser, and its files under `/ui/`, read from the package
(localspec/server/ui/) so an installed wheel serves them too. No API key is needed for the page
itself: it asks for one when /v1 answers 401. Everything the page runs comes from here; the CSP
forbids inline script and any other origin. Ollama's clients probe `/` too (index() says how both
are answered)."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from localspec.server.errors import APIError

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidate: an upgraded package serves its new page at once
}
# module scripts are refused unless served as JavaScript; nosniff makes every type matter
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}

router = APIRouter(include_in_schema=False)
OLLAMA_RUNNING = "Ollama is running"  # what Ollama answers at / (its clients probe for a server with it)


def _read(path: str) -> bytes | None:
    """The bytes of ui/<path>, or None if no such file. Only plain names below ui/ resolve: no '..',
    no absolute paths, nothing outside the package folder."""
    parts = path.split("/")
    if any(p in ("", ".", "..") or "\\" in p or p.startswith(".") for p in parts):
        return None
    node = resources.files(__package__).joinpath("ui", *parts)
    return node.read_bytes() if node.is_file() else None


def _serve(path: str) -> Response:
    suffix = "." + path.rsplit(".", 1)[-1] if "." in path else ""
    body = _read(path) if suffix in TYPES else None
    if body is None:
        raise APIError(404, f"no such page file: /ui/{path}", type="not_found_error")
    return Response(body, media_type=TYPES[suffix], headers=HEADERS)


@router.api_route("/", methods=["GET", "HEAD"])
async def index(request: Request) -> Response:
    """The page for a browser (it asks for HTML); anything else probing `/` is an Ollama client
    checking that a server is there (HEAD, or GET with Accept */* or JSON): Ollama's answer."""
    if request.method == "HEAD" or "text/html" not in request.headers.get("accept", ""):
        return PlainTextResponse(OLLAMA_RUNNING)
    return _serve("index.html")


@router.api_route("/ui/{path:path}", methods=["GET", "HEAD"])
async def asset(path: str) -> Response:
    return _serve(path)
