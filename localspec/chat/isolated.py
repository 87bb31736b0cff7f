"""A chat template renders in a child process, under hard limits no filter can get around.

bounded.py's checks run inside the render and give the clear messages, but a filter or a method
runs in C where they cannot reach: `'x'|center(10**9)` builds a gigabyte in one call. So the render
runs in one long-lived child (`python -m localspec.chat.isolated`) whose address space is capped
(RLIMIT_AS: MemoryError past RENDER_MEMORY) and which is killed once RENDER_S + KILL_GRACE_S have
passed without an answer; the next render starts a fresh child. Renders take turns (a lock): they
take milliseconds. A new child says when it is ready (its imports done), and only then does the
render's clock start: on a loaded machine starting Python can take longer than a render may. The
request goes down as a pickle (the child trusts its parent); the answer comes back as a status byte
and UTF-8 text, never unpickled.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from localspec.chat.bounded import RENDER_CHARS, RENDER_S, TemplateTooBig
from localspec.errors import LocalspecError

RENDER_MEMORY = 512 << 20  # bytes of address space a render may add to the child's own
KILL_GRACE_S = 1.0  # past RENDER_S: the in-render clock answers first when it can
START_S = 120.0  # a new child's start (an interpreter and its imports), however loaded the machine
_OK, _FAILED, _BOUND, _READY = b"0", b"1", b"2", b"R"  # the answer's first byte; the child's hello


class _Child:
    def __init__(self) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the folder holding the localspec package
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localspec.chat.isolated"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        self.down = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.up = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        try:  # ready before any render's clock runs (a timed-out start failed the tool probes for good)
            ready = self.up.poll(START_S) and self.up.recv_bytes() == _READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.close()
            raise LocalspecError(f"the chat template renderer did not start in {START_S:g} s")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.down.close()
        self.up.close()


_lock = threading.Lock()
_child: _Child | None = None


def render(template: str, variables: dict[str, Any]) -> str:
    """The template's text for `variables`, rendered in the child; LocalspecError (TemplateTooBig
    for a bound) when it fails, grows too big or takes too long."""
    global _child
    request = pickle.dumps((template, variables), protocol=pickle.HIGHEST_PROTOCOL)
    with _lock:
        if _child is None or _child.proc.poll() is not None:
            _child = _Child()
        child = _child
        try:
            child.down.send_bytes(request)
            if not child.up.poll(RENDER_S + KILL_GRACE_S):
                _child = None
                child.close()
                raise TemplateTooBig(
                    f"the chat template took more than {RENDER_S:g} s to render (does it loop without end?)"
                )
            reply = child.up.recv_bytes(maxlength=4 * RENDER_CHARS + 1)
        except (EOFError, OSError):  # it died (killed, or out of memory where it could not answer)
            _child = None
            child.close()
            raise TemplateTooBig(
                f"the chat template's renderer stopped (a template that needs more than "
                f"{RENDER_MEMORY >> 20} MiB?)"
            ) from None
    text = reply[1:].decode("utf-8", "surrogatepass")
    if reply[:1] == _OK:
        return text
    raise (TemplateTooBig if reply[:1] == _BOUND else LocalspecError)(text)


@atexit.register
def _stop() -> None:
    if _child is not None:
        _child.close()


# -- the child --------------------------------------------------------------------------------------
def _limit_memory() -> None:
    try:
        import resource  # noqa: PLC0415 - POSIX only
    except ImportError:
        return
    with open("/proc/self/status") as f:  # Linux: what the interpreter already holds
        size = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + RENDER_MEMORY, size + RENDER_MEMORY))


def _serve() -> None:
    from localspec.chat.compiled import render_here  # noqa: PLC0415 - the child's side only

    down = Connection(os.dup(0), writable=False)
    up = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    _limit_memory()
    up.send_bytes(_READY)
    while True:
        try:
            template, variables = pickle.loads(down.recv_bytes())
        except EOFError:  # the parent is gone
            return
        try:
            reply = _OK + render_here(template, variables).encode("utf-8", "surrogatepass")
        except MemoryError:
            reply = _BOUND + f"the chat template needs more than {RENDER_MEMORY >> 20} MiB to render".encode()
        except TemplateTooBig as e:
            reply = _BOUND + str(e).encode("utf-8", "surrogatepass")
        except LocalspecError as e:
            reply = _FAILED + str(e).encode("utf-8", "surrogatepass")
        template = variables = None
        up.send_bytes(reply)


if __name__ == "__main__":
    _serve()
