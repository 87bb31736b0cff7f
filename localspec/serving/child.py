"""One model's process in router mode (`python -m localspec.serving.child FD`): it loads the
Engine the router's settings name, serves it through the same LocalModel as `serve --pair`, and
speaks the internal request and event stream over the pipe (pipe.py) on file descriptor FD.

The router sends ("load", settings, name) first, then requests; this process answers:
  ("ready", card, devices, load_s) or ("failed", reason)          once, after the load
  ("reply", id, error, value)       to ("call", id, method, args, kwargs): tokenize, render, ...
  ("submitted", id, error), ("event", id, event)..., ("end", id, error)   to ("submit", id, request)
  ("booked", what, args)            a finished choice's totals (the router keeps them per model)
  ("busy", running, waiting)        whenever that changes
("cancel", id) stops a request; ("exit",) unloads: cancel what runs, free the models, exit. The
end of the pipe (the router gone) ends this process at once."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from typing import Any

from localspec.engine import Engine
from localspec.engine.facade import devices
from localspec.errors import LocalspecError
from localspec.serving.local import LocalModel
from localspec.serving.pipe import Pipe, error_out

DRAIN_S = 10.0
SYNC_CALLS = ("token_bytes", "devices")
ASYNC_CALLS = (
    "render",
    "embed",
    "tokenize",
    "pieces",
    "detokenize",
)  # the facade's awaited methods; a new one is one more name here


def say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def main(fd: int) -> int:
    pipe = Pipe(fd)
    try:
        _, settings, name = pipe.recv()
    except (EOFError, OSError):
        return 1
    started = time.monotonic()
    try:
        engine = Engine(settings, log=say)
    except LocalspecError as e:
        pipe.send("failed", str(e))
        return 1
    except Exception as e:  # noqa: BLE001 - a bug of ours, said in one line to the router
        pipe.send("failed", f"internal error: {type(e).__name__}: {e}")
        return 2
    asyncio.run(Served(pipe, engine, settings, name).run(time.monotonic() - started))
    return 0


class Booked:
    """LocalModel's totals, sent to the router (which keeps them across loads) instead of kept."""

    def __init__(self, pipe: Pipe) -> None:
        self.pipe = pipe

    def record(self, *args: Any) -> None:
        self.pipe.send("booked", "record", args)

    def count(self, what: str) -> None:
        self.pipe.send("booked", "count", (what,))


class Served:
    def __init__(self, pipe: Pipe, engine: Engine, settings: Any, name: str) -> None:
        self.pipe, self.engine, self.settings, self.name = pipe, engine, settings, name
        self.streams: dict[int, Any] = {}
        self.busy = (0, 0)

    async def run(self, load_s: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.model = LocalModel(self.engine, self.settings, self.name)
        self.model.totals = Booked(self.pipe)  # type: ignore[assignment]
        self.leave = asyncio.Event()
        self.pipe.send("ready", self.model.card, devices(), load_s)
        threading.Thread(target=self._read, name="localspec-pipe", daemon=True).start()
        await self.leave.wait()
        clean = await self.model.drain(DRAIN_S)
        if clean:
            self.engine.close()
        self.pipe.close()

    def _read(self) -> None:
        """The pipe's reader: quick calls answered here, the rest handed to the event loop."""
        while True:
            try:
                msg = self.pipe.recv()
            except (EOFError, OSError):
                os._exit(0)  # the router is gone: nobody is left to answer
            if msg[0] == "call" and msg[2] in SYNC_CALLS:
                self._reply(msg[1], msg[2], msg[3], msg[4])
            else:
                self.loop.call_soon_threadsafe(self._handle, msg)
            if msg[0] == "exit":
                return

    def _reply(self, cid: int, method: str, args: tuple, kwargs: dict) -> None:
        try:
            value = devices() if method == "devices" else getattr(self.model, method)(*args, **kwargs)
            err = None
        except Exception as e:  # noqa: BLE001 - crosses the pipe as the request's error
            value, err = None, error_out(e)
        self.pipe.send("reply", cid, err, value)

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "submit":
            asyncio.ensure_future(self._submit(msg[1], msg[2]))
        elif kind == "call" and msg[2] in ASYNC_CALLS:
            asyncio.ensure_future(self._acall(*msg[1:]))
        elif kind == "call":  # a router newer than this list: said, not left waiting
            self.pipe.send(
                "reply", msg[1], error_out(TypeError(f"no call {msg[2]!r} in a model's process")), None
            )
        elif kind == "cancel" and msg[1] in self.streams:
            self.streams[msg[1]].cancel()
        elif kind == "exit":
            self.leave.set()

    async def _acall(self, cid: int, method: str, args: tuple, kwargs: dict) -> None:
        try:
            value, err = await getattr(self.model, method)(*args, **kwargs), None
        except Exception as e:  # noqa: BLE001
            value, err = None, error_out(e)
        self.pipe.send("reply", cid, err, value)

    async def _submit(self, rid: int, req: Any) -> None:
        try:
            stream = await self.model.submit(req)
        except Exception as e:  # noqa: BLE001 - refused before anything streamed
            self.pipe.send("submitted", rid, error_out(e))
            return
        self.streams[rid] = stream
        self.pipe.send("submitted", rid, None)
        self._busy()
        err = None
        try:
            async for event in stream:
                self.pipe.send("event", rid, event)
        except Exception as e:  # noqa: BLE001
            err = error_out(e)
        finally:
            del self.streams[rid]
            self.pipe.send("end", rid, err)
            self._busy()

    def _busy(self) -> None:
        busy = self.model.load()
        if busy != self.busy:
            self.busy = busy
            self.pipe.send("busy", *busy)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
