"""`localspec serve` when an rpc-server drops: the requests in flight end with a 503 in OpenAI's
shape, and the server comes back with a freshly loaded engine once the rpc-servers answer again.

The server re-executes itself (os.execv: same PID, command line, environment and stdio; an --api-key
moves from the command line into the environment, where `ps` does not show it):
- reloading in place is impossible: llama.cpp's RPC client calls abort() on a lost connection,
  from inside llama_decode; that thread can never return, and freeing the models would talk to the
  dead server and abort again. Only a fresh process image has a working llama.cpp;
- a supervisor parent process would give the same fresh image at the price of a second process to
  keep right (signals and Ctrl-C forwarded, exit codes passed on, two PIDs for systemd or docker to
  track); exec keeps the one PID they already watch, and SIGTERM still reaches the server itself.

The sequence: llama.cpp's thread calls `EngineLost` (llama.on_rpc_lost) and stays parked there;
the event loop ends every admitted request with the 503 (a stream gets it as its last event) and
refuses new ones; uvicorn shuts down gracefully, which flushes those responses; `serve` then
re-executes. Should the main thread never get there, the parked thread re-executes after FALLBACK_S.

The reloaded process waits for its rpc-servers (`wait_for_servers`), saying so in one line, and
retries until they answer or it is stopped. A first start fails fast instead (a dead server there
is most likely a typo in --rpc), but a server that was serving has a known-good configuration:
the outage is on another machine (a reboot, an rpc-server restarted), transient by nature, and
nothing here can fix it. Exiting would only hand the same wait to a supervisor that may not exist,
or that gives up after a few quick restarts (systemd's start limit). While it waits the port is
closed, so a load balancer or a client sees at once that this server cannot answer.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Sequence

from localspec.config.settings import API_KEY_ENV
from localspec.errors import LocalspecError
from localspec.serving.errors import APIError

RELOAD_ENV = "LOCALSPEC_SERVE_RELOADED"  # set in the re-executed process: how many reloads so far
FALLBACK_S = 30.0  # uvicorn's graceful shutdown (10 s) has long finished by then
RETRY_S = 2.0  # how often a reloaded server probes its rpc-servers while they are down
RETRY_AFTER_S = 5  # what the 503 tells clients


def reloads() -> int:
    """How many times this server has reloaded its engine (0 in a first start)."""
    value = os.environ.get(RELOAD_ENV, "0")
    return int(value) if value.isdigit() else 0


def reexec() -> None:
    """Replace this process with a fresh `localspec serve` of the same command line, an --api-key
    on it moved into the environment."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    _close_on_exec()
    os.environ[RELOAD_ENV] = str(reloads() + 1)
    argv, key = without_api_key(sys.orig_argv[1:])
    if key is not None:
        os.environ[API_KEY_ENV] = key
    os.execv(sys.executable, [sys.executable, *argv])


def without_api_key(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """`argv` without `--api-key KEY` (or `--api-key=KEY`), and the key. The re-executed server reads
    it from its environment, which only this user can read (/proc/PID/environ), not from a command
    line `ps` shows to everyone."""
    out: list[str] = []
    key = None
    args = iter(argv)
    for arg in args:
        if arg == "--api-key":
            key = next(args, None)
        elif arg.startswith("--api-key="):
            key = arg.split("=", 1)[1]
        else:
            out.append(arg)
    return out, key


def _close_on_exec() -> None:
    """llama.cpp opens its sockets without CLOEXEC: the connections to the rpc-servers still alive
    would live on, unused, in the new image, and an rpc-server serves one client at a time, so the
    reloaded engine could never connect to them again. Marked, not closed: threads may still hold them."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = [int(fd) for fd in os.listdir(folder)]
            break
        except OSError:
            continue
    else:
        fds = list(range(3, 4096))
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


def wait_for_servers(
    endpoints: Sequence[str],
    probe: Callable[[str], None],
    say: Callable[[str], None],
    retry_s: float = RETRY_S,
) -> None:
    """Return once every endpoint answers the RPC handshake (`probe` raises LocalspecError while it
    does not); until then probe every `retry_s`."""
    waiting = False
    while True:
        try:
            for endpoint in endpoints:
                probe(endpoint)
            break
        except LocalspecError as e:
            if not waiting:
                say(f"waiting for the rpc-servers, retrying every {retry_s:g} s (Ctrl-C to stop): {e}")
                waiting = True
            time.sleep(retry_s)
    if waiting:
        say("the rpc-servers answer again; reloading the engine")


class EngineLost:
    """llama.on_rpc_lost's handler while the server runs (see the module's docstring)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._lock = threading.Lock()
        self._server: Any = None
        self._app: Any = None
        self.line: str | None = None  # what llama.cpp's failure was, once it happened

    def install(self, server: Any, app: Any) -> None:
        """Take over once `server` (a uvicorn.Server) serves `app` (the caller hands this handler
        to llama.on_rpc_lost: nothing under server/ touches llama.cpp)."""
        self._server, self._app = server, app

    def __call__(self, line: str) -> None:  # on llama.cpp's thread (or the RPC watchdog's)
        with self._lock:
            first = self.line is None
            if first:
                models = getattr(self._app.state, "models", None) if self._app else None
                if models is None or self._server.should_exit:
                    return  # not serving yet, or shutting down anyway: the process ends with the line
                # the line's advice is for a one-shot command ("...; restart it and run again"): here
                # the server retries by itself
                self.line = line = line.rsplit("; ", 1)[0] if line.endswith("run again") else line
        if first:
            self._say(f"error: {line}")
            self._say("the requests in flight get a 503; reloading the engine")
            error = APIError(
                503,
                f"the server lost an rpc-server and is reloading its engine; retry shortly ({line})",
                type="server_error",
                code="rpc_server_lost",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
            for model in models:
                model.loop.call_soon_threadsafe(model.fail_all, error)
            self._server.should_exit = True  # uvicorn's graceful shutdown; `serve` re-executes after it
        time.sleep(FALLBACK_S)
        reexec()
