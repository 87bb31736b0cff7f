"""The pipe between the router and one model's process: pickled tuples over one end of a socket
pair that only the two of them hold (nothing listens on a port, so there is no port to secure).
Either side sends from any thread; one thread of each side reads. Errors cross as plain tuples
(an APIError does not survive pickling: its arguments are not its constructor's)."""

from __future__ import annotations

import threading
from multiprocessing.connection import Connection
from typing import Any

from localspec.serving.errors import APIError, as_api_error


class Pipe:
    def __init__(self, fd: int) -> None:
        self._conn = Connection(fd)
        self._lock = threading.Lock()

    def send(self, *msg: Any) -> None:
        """Raises OSError once the other side is gone."""
        with self._lock:
            self._conn.send(msg)

    def recv(self) -> tuple:
        """The next message; EOFError (or OSError) when the other side is gone."""
        return self._conn.recv()

    def close(self) -> None:
        self._conn.close()


def error_out(e: BaseException) -> tuple:
    """An exception as it crosses the pipe: a request's error (APIError and what maps to one)."""
    a = as_api_error(e)
    return (a.status, a.message, a.type, a.param, a.code, a.headers)


def error_in(t: tuple) -> APIError:
    status, message, type_, param, code, headers = t
    return APIError(status, message, type=type_, param=param, code=code, headers=headers)
