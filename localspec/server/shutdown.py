"""A SIGTERM answers every request in flight in its API's shape.

uvicorn's graceful shutdown stops accepting connections and waits for the open ones; past its
timeout it cancels what is left, and a request still waiting for a whole answer got a plain-text
500 and a traceback in the log. So uvicorn tells the app when its shutdown starts (`Server`), and
each model lets its requests run SHUTDOWN_GRACE_S more, then cancels the rest: a whole answer gets
a 503 in its dialect's shape, a stream its error frame, well before uvicorn's FORCE_AFTER_S.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn

SHUTDOWN_GRACE_S = 10.0  # a request in flight gets this long to finish
FORCE_AFTER_S = SHUTDOWN_GRACE_S + 5  # uvicorn's own graceful shutdown: then it cuts connections


class Server(uvicorn.Server):
    """uvicorn's server, which starts the app's wind-down when a SIGTERM (or Ctrl-C) starts its
    graceful shutdown. Its exit handler stays a bound method: sse-starlette finds the server
    through it to end open streams."""

    def handle_exit(self, sig: int, frame: Any) -> None:
        if not self.should_exit:
            begin_shutdown(self.config.app)  # the app serve handed uvicorn
        super().handle_exit(sig, frame)


def begin_shutdown(app: Any) -> None:
    """Wind every model down on the app's event loop (safe from a signal handler on its thread)."""
    loop = getattr(getattr(app, "state", None), "loop", None)
    if loop is not None:
        loop.call_soon_threadsafe(lambda: loop.create_task(_wind_down(app)))


async def _wind_down(app: Any, grace: float = SHUTDOWN_GRACE_S) -> None:
    models = list(getattr(app.state, "models", ()))
    await asyncio.gather(*(m.wind_down(grace) for m in models))
