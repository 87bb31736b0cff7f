"""The HTTP protocol `serve` runs: uvicorn's h11 one, with a deadline for reading each request.

uvicorn closes an idle keep-alive connection (timeout_keep_alive) and bounds a request's header
size (h11_max_incomplete_event_size), but a client that opens a connection and never finishes its
headers, or dribbles them (slowloris), holds its socket and a file descriptor for ever: enough of
them and the server cannot accept anyone else. Here a request must be read whole, headers and
body, within READ_TIMEOUT_S of the connection opening or of the previous response's end.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

READ_TIMEOUT_S = 10.0  # a request body is at most --max-body (8 MB): on loopback, milliseconds
HEADER_MAX_BYTES = 16 * 1024  # uvicorn's default, said here: longer headers get a 400
KEEP_ALIVE_S = 5  # uvicorn's default: an idle connection is closed after this


class GuardedH11(H11Protocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._disarm()  # read whole (or the connection is ending): what runs now is the app's

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next request on this connection gets its own deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(READ_TIMEOUT_S, self._too_slow)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _too_slow(self) -> None:
        self._read_deadline = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.transport.close()
