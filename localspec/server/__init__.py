"""`localspec serve`: the HTTP server - dialects over one model facade (FastAPI + uvicorn + SSE).

app.py (factory, body limit) mounts the dialects listed in dialects.py; each is a module that parses
its requests into the one internal request and renders the one event stream (localspec/serving/)
in its own wire format and error shape. framing.py puts streams on the wire (SSE, NDJSON),
fields.py is the unknown-field policy, errors.py picks each error's shape by path, metrics.py is
/metrics. Nothing here imports localspec.llama or reaches into the Engine: only the facade.
"""

from localspec.server.app import create_app

__all__ = ["create_app"]
