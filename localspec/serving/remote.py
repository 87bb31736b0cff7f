"""One model's process, from the router's side: start it (child.py) and wait for its load, then
call it and stream from it as the model facade does (the internal request goes in, the events come
back, each request's stream here looking exactly like LocalModel's), and stop it.

One reader thread per process takes its messages off the pipe: events go to the event loop (as the
engine thread's chunks do in LocalModel), replies to whoever waits for them. The quick calls
(tokenize, detokenize, token_bytes) block their caller for one round trip, as the facade's
protocol has them synchronous; a render and a submit are awaited."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

from localspec.config.settings import Settings
from localspec.errors import LocalspecError
from localspec.serving.errors import APIError
from localspec.serving.events import Event, Finished
from localspec.serving.facade import ModelCard
from localspec.serving.pipe import Pipe, error_in
from localspec.serving.request import Request
from localspec.serving.stream import collect_finished
from localspec.serving.totals import Counting

CALL_TIMEOUT_S = 30.0
STOP_GRACE_S = 15.0  # an unload's drain and free, before the process is killed
TAIL_LINES = 20  # of the process's stderr, kept to say why it died


class Child:
    def __init__(
        self,
        name: str,
        settings: Settings,
        totals: Counting,
        on_exit: Callable[["Child", str], None],
        say: Callable[[str], None],
    ) -> None:
        """`on_exit(child, reason)` runs on the event loop when the process has gone, whatever the
        cause; `totals` receives what its finished requests did."""
        self.name, self.settings, self.totals = name, settings, totals
        self._on_exit, self._say = on_exit, say
        self.card: ModelCard | None = None
        self.devices: list[tuple[str, str, int, int]] = []
        self.load_s = 0.0
        self.busy = (0, 0)  # (running, waiting), as the process last said
        self.stopping = False
        self._ids = itertools.count()
        self._calls: dict[int, concurrent.futures.Future] = {}
        self._streams: dict[int, RemoteStream] = {}
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._ready: asyncio.Future | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    # -- life --------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the process and wait for its load; LocalspecError with the reason if it failed."""
        self.loop = asyncio.get_running_loop()
        mine, theirs = socket.socketpair()
        env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_API_KEY"}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "localspec.serving.child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env=env,
                start_new_session=True,  # Ctrl-C reaches the router, which unloads its models in order
            )  # fmt: skip
        finally:
            theirs.close()
        self.pipe = Pipe(os.dup(mine.fileno()))
        mine.close()
        self._ready = self.loop.create_future()
        threading.Thread(target=self._read_log, name=f"localspec-log-{self.name}", daemon=True).start()
        threading.Thread(target=self._read, name=f"localspec-pipe-{self.name}", daemon=True).start()
        self.pipe.send("load", self.settings, self.name)
        await self._ready

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Unload: the process cancels what runs, frees the models and exits; killed past `grace`."""
        self.stopping = True
        if self.proc is None:
            return
        try:
            self.pipe.send("exit")
        except OSError:
            pass
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(None, self.proc.wait), grace)
        except asyncio.TimeoutError:
            self.kill()
            await loop.run_in_executor(None, self.proc.wait)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._tail.append(line)
                self._say(f"[{self.name}] {line}")

    def _read(self) -> None:
        while True:
            try:
                msg = self.pipe.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "reply":
                fut = self._calls.pop(msg[1], None)
                if fut is not None and not fut.done():
                    fut.set_exception(error_in(msg[2])) if msg[2] else fut.set_result(msg[3])
            elif msg[0] == "booked":
                getattr(self.totals, msg[1])(*msg[2])
            else:
                self.loop.call_soon_threadsafe(self._handle, msg)
        assert self.proc is not None
        code = self.proc.wait()
        self.pipe.close()
        self.loop.call_soon_threadsafe(self._gone, code)

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "ready":
            self.card, self.devices, self.load_s = msg[1], msg[2], msg[3]
            _settle(self._ready, None)
        elif kind == "failed":
            _settle(self._ready, LocalspecError(msg[1]))
        elif kind == "busy":
            self.busy = (msg[1], msg[2])
        elif msg[1] in self._streams:  # submitted, event, end
            self._streams[msg[1]].deliver(kind, msg[2])

    def _gone(self, code: int) -> None:
        """The process has exited (on the event loop): everything still waiting on it fails."""
        reason = self._exit_reason(code)
        _settle(self._ready, LocalspecError(reason))
        error = APIError(500 if not self.stopping else 503, reason, code="model_process_exited")
        for fut in list(self._calls.values()):
            if not fut.done():
                fut.set_exception(error)
        for stream in list(self._streams.values()):
            stream.deliver("end", None, error)
        self._on_exit(self, reason)

    def _exit_reason(self, code: int) -> str:
        if self.stopping:
            return f"{self.name} was unloaded"
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        last = next((line for line in reversed(self._tail) if line.startswith("error")), "")
        if code == -signal.SIGKILL:
            how += " (out of memory?)"
        return f"the process serving {self.name} {how}" + (f": {last}" if last else "")

    # -- calls -------------------------------------------------------------------------------------
    def _call(self, method: str, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        cid = next(self._ids)
        self._calls[cid] = fut
        try:
            self.pipe.send("call", cid, method, args, kwargs)
        except OSError:
            self._calls.pop(cid, None)
            raise APIError(503, f"{self.name} is not loaded any more; retry", code="model_unloaded") from None
        return fut

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A quick call, waited for here (tokenize, detokenize, token_bytes, devices)."""
        try:
            return self._call(method, *args, **kwargs).result(CALL_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise APIError(503, f"{self.name} did not answer within {CALL_TIMEOUT_S:g} s") from None

    async def acall(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """An awaited call of the model facade's (render; any async method child.ASYNC_CALLS names)."""
        return await asyncio.wrap_future(self._call(method, *args, **kwargs))

    async def submit(self, req: Request, on_end: Callable[[], None]) -> "RemoteStream":
        """Start `req` in the process: its refusal raises here (as LocalModel's does); `on_end` runs
        once when the process is done with it, however it ended."""
        rid = next(self._ids)
        stream = RemoteStream(self, rid, on_end)
        self._streams[rid] = stream
        try:
            self.pipe.send("submit", rid, req)
        except OSError:
            stream.deliver("end", None, APIError(503, f"{self.name} is not loaded any more; retry"))
        await stream.submitted
        return stream

    def _cancel(self, rid: int) -> None:
        try:
            self.pipe.send("cancel", rid)
        except OSError:
            pass

    def _ended(self, rid: int) -> None:
        self._streams.pop(rid, None)


class RemoteStream:
    """One request's events from a model's process: the facade's Stream."""

    def __init__(self, child: Child, rid: int, on_end: Callable[[], None]) -> None:
        self._child, self._rid, self._on_end = child, rid, on_end
        self.submitted: asyncio.Future = child.loop.create_future()
        self._queue: asyncio.Queue = asyncio.Queue()
        self.done = False

    def deliver(self, kind: str, payload: Any, error: APIError | None = None) -> None:
        if self.done:
            return
        if kind == "submitted" and not payload:
            _settle(self.submitted, None)
        elif kind == "event":
            self._queue.put_nowait(payload)
        else:  # end, or refused: from the process (payload: its error) or from here (error)
            err = error or (error_in(payload) if payload else None)
            self.done = True
            self._child._ended(self._rid)
            _settle(self.submitted, err)
            self._queue.put_nowait(err or _END)
            self._on_end()

    def cancel(self) -> None:
        if not self.done:
            self._child._cancel(self._rid)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        try:
            while True:
                item = await self._queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.cancel()

    async def finished(self, is_disconnected: Callable[[], Awaitable[bool]]) -> list[Finished]:
        return await collect_finished(self, is_disconnected)


_END = object()


def _settle(fut: asyncio.Future | None, error: BaseException | None) -> None:
    if fut is not None and not fut.done():
        fut.set_exception(error) if error is not None else fut.set_result(None)


def accelerator(devices: Sequence[tuple[str, str, int, int]]) -> tuple[str, int] | None:
    """The accelerator a process reported with the most free memory: (name, free bytes)."""
    acc = [d for d in devices if d[1] == "gpu"] or [d for d in devices if d[1] == "igpu"]
    if not acc:
        return None
    best = max(acc, key=lambda d: d[2])
    return best[0], best[2]
