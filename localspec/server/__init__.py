"""`localspec serve`: an OpenAI-compatible HTTP server over the engine (FastAPI + uvicorn + SSE).

app.py (factory, body limit) -> routes.py (endpoints; sse.py formats streams) -> service.py
(admission, engine threads -> event loop, cancellation) -> the engine. schemas.py is the wire format,
render.py formats results, metrics.py is /metrics, errors.py gives every error OpenAI's shape.
"""

from localspec.server.app import create_app

__all__ = ["create_app"]
