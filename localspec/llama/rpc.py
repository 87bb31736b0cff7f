"""Remote devices over llama.cpp's RPC backend (`ggml-rpc-server` on other machines), checked from
Python so that the failures llama.cpp answers with abort() become one clear line instead.

llama.cpp's RPC client (0.3.36) calls GGML_ABORT when it cannot connect, when the handshake fails
and when a server drops mid-request; nothing in the process survives that. So:
  - `probe()` does the protocol's HELLO handshake itself before llama.cpp ever connects: an
    unreachable host, a busy server or another protocol version is a LocalspecError;
  - `explain_abort()` turns llama.cpp's abort message into the line printed on the way out
    (backend installs it as ggml's abort callback once RPC servers are in use);
  - `Watchdog` bounds a decode stuck on a silent network (a host gone without a TCP reset).
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import llama_cpp as C

from localspec.errors import LocalspecError
from localspec.llama.context import decode_busy_s
from localspec.llama.devices import ABORT_CB, c_str, ggml_lib
from localspec.llama.log import init_backend, log_lines

PROTO_VERSION = (7, 0, 0)  # RPC_PROTO_*_VERSION in the vendored ggml-rpc.h
_CMD_HELLO = 14  # fixed forever by the protocol (static_assert in ggml-rpc.cpp)
_CAPS = 24  # RPC_CONN_CAPS_SIZE; all zero = plain TCP
SERVER_HINT = (
    "start it there with `ggml-rpc-server -H 0.0.0.0 -p {port}` (built by tools/build/build_rpc_server.sh; "
    "bind to a trusted network only) or drop it from --rpc"
)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class ServerInfo:
    endpoint: str
    version: tuple[int, int, int]
    hello_ms: float  # connect + handshake: about two network round trips


def probe(endpoint: str, timeout: float = 3.0) -> ServerInfo:
    """Connect and do the HELLO handshake as llama.cpp would, then hang up.

    rpc-server serves one client at a time, so this is only meaningful before this process
    holds its own connection to `endpoint` (llama.cpp keeps one while a model uses it)."""
    host, port = _split(endpoint)
    hint = SERVER_HINT.format(port=port)
    t0 = time.perf_counter()
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        raise LocalspecError(f"cannot reach rpc-server at {endpoint}: connection refused; {hint}") from None
    except (socket.timeout, TimeoutError):
        raise LocalspecError(
            f"cannot reach rpc-server at {endpoint}: no answer within {timeout:g} s (host down or "
            f"firewalled?); {hint}"
        ) from None
    except OSError as e:
        raise LocalspecError(f"cannot reach rpc-server at {endpoint}: {e.strerror or e}; {hint}") from None
    with sock:
        try:
            sock.sendall(struct.pack("<BQ", _CMD_HELLO, _CAPS) + bytes(_CAPS))
            size = struct.unpack("<Q", _recv(sock, 8))[0]
            reply = _recv(sock, size)
        except (socket.timeout, TimeoutError):
            raise LocalspecError(
                f"rpc-server at {endpoint} accepted the connection but did not answer within {timeout:g} s: "
                "it serves one client at a time; is another process using it?"
            ) from None
        except OSError as e:
            raise LocalspecError(
                f"rpc-server at {endpoint} hung up during the handshake ({e}): is that port an rpc-server "
                f"of a different llama.cpp version? Build the matching one with tools/build/build_rpc_server.sh"
            ) from None
    if len(reply) < 3:
        raise LocalspecError(f"rpc-server at {endpoint} sent a malformed handshake ({len(reply)} bytes)")
    version = (reply[0], reply[1], reply[2])
    if version[0] != PROTO_VERSION[0] or version[1] > PROTO_VERSION[1]:
        raise LocalspecError(
            f"rpc-server at {endpoint} speaks RPC protocol {'.'.join(map(str, version))}, this llama.cpp "
            f"speaks {'.'.join(map(str, PROTO_VERSION))}: build the server from the same llama.cpp with "
            "tools/build/build_rpc_server.sh"
        )
    return ServerInfo(endpoint, version, (time.perf_counter() - t0) * 1e3)


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionResetError("connection closed")
        buf += part
    return bytes(buf)


def reachable(endpoint: str, timeout: float = 1.0) -> bool:
    """A bare TCP connect (no handshake: the server may be busy serving us)."""
    try:
        with socket.create_connection(_split(endpoint), timeout=timeout):
            return True
    except OSError:
        return False


def explain_abort(message: str, endpoints: Sequence[str], recent_log: Sequence[str] = ()) -> str:
    """The one line for a llama.cpp abort while RPC servers are in use."""
    if any("version mismatch" in line for line in recent_log[-20:]):
        seen = next(line for line in reversed(recent_log) if "version mismatch" in line)
        return (
            f"an rpc-server runs another RPC protocol ({seen.split(':')[-1].strip()}; ours is "
            f"{'.'.join(map(str, PROTO_VERSION))}): build it with tools/build/build_rpc_server.sh"
        )
    rpc_words = ("RPC", "rpc", "Failed to connect", "handshake")
    if not any(w in message for w in rpc_words):
        return f"llama.cpp aborted: {message.strip()}"
    down = [e for e in endpoints if not reachable(e)]
    deadline = time.monotonic() + 1.0
    while not down and time.monotonic() < deadline:  # a dying server may still hold its port a moment
        time.sleep(0.1)
        down = [e for e in endpoints if not reachable(e)]
    if down:
        return (
            f"lost the connection to rpc-server at {', '.join(down)} (it stopped or the network "
            "dropped); restart it and run again"
        )
    return (
        f"the connection to an rpc-server ({', '.join(endpoints)}) failed: {message.split(': ', 1)[-1].strip()}"
        "; restart the servers and run again"
    )


class Watchdog:
    """Bounds a decode that waits on a silent network: llama.cpp's RPC sockets have no timeout, so
    a host that vanished without a TCP reset would hang the request forever. Every second it asks
    `busy_for()` how long the current decode has run; past `stall_s` it checks every endpoint with a
    TCP connect and calls `fatal(line)` when one is gone (a slow but live server is left alone)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        busy_for: Callable[[], float],
        fatal: Callable[[str], None],
        stall_s: float = 30.0,
        period_s: float = 1.0,
    ) -> None:
        self.endpoints = endpoints  # read at each check: servers added later are watched too
        self._busy_for, self._fatal = busy_for, fatal
        self.stall_s, self.period_s = stall_s, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="localspec-rpc-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            if self._busy_for() < self.stall_s:
                continue
            down = [e for e in self.endpoints if not reachable(e, timeout=3.0)]
            if down:
                self._fatal(
                    f"rpc-server at {', '.join(down)} stopped answering (a decode waited "
                    f"{self._busy_for():.0f} s); check that host and its network, then run again"
                )
                return

    def stop(self) -> None:
        self._stop.set()


# ---------------------------------------------------------------------------------------------------
# RPC servers (ggml-rpc): ggml_backend_rpc_add_server is reached through the RPC registry's proc
# address, as llama.cpp's own --rpc does, then registered so llama.cpp sees its devices. llama.cpp
# aborts the process on any RPC connection failure, so the endpoints are probed first and an abort
# callback turns a later failure into one line and exit status 1 (rpc.py says why).
_RPC_ADD = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_RPC_ENDPOINTS: list[str] = []  # registered in this process, in order (a registry is never removed)
_RPC_GUARD: list = []  # the abort callback and the watchdog, kept alive for the process


def rpc_supported() -> bool:
    """Whether this llama.cpp was built with -DGGML_RPC=ON."""
    init_backend()
    return bool(C.llama_supports_rpc())


def add_rpc_servers(endpoints: Sequence[str], *, stall_s: float = 30.0) -> None:
    """Make each rpc-server's devices llama.cpp devices (probing each first; idempotent)."""
    new = [e for e in endpoints if e not in _RPC_ENDPOINTS]
    if not new:
        return
    if not rpc_supported():
        raise LocalspecError(
            "--rpc needs llama-cpp-python built with -DGGML_RPC=ON: rebuild with `make setup` (GPU "
            'users: add it to their flags, e.g. CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=ON")'
        )
    for e in new:  # before llama.cpp connects: its own failure to connect is an abort
        probe(e)
    lib = ggml_lib()
    _guard_rpc(lib, stall_s)
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server") if reg else None
    if not fn:
        raise LocalspecError("this llama.cpp's RPC backend has no ggml_backend_rpc_add_server")
    add = _RPC_ADD(fn)
    for e in new:
        server_reg = add(e.encode())
        if not server_reg:
            raise LocalspecError(f"rpc-server at {e} reports no devices")
        lib.ggml_backend_register(server_reg)
        _RPC_ENDPOINTS.append(e)


_RPC_ON_LOST: list[Callable[[str], None]] = []  # `localspec serve`'s recovery, see on_rpc_lost


def on_rpc_lost(handler: Callable[[str], None] | None) -> None:
    """Who hears first that an rpc-server is lost (the one line rpc.py makes of it). The handler runs
    on llama.cpp's thread, which must never return into llama.cpp (abort() follows): it either takes
    over for good (blocks, then ends the process its own way) or returns to decline, and the process
    exits with the line and status 1 as without a handler."""
    _RPC_ON_LOST[:] = [handler] if handler else []


def _rpc_fatal(line: str) -> None:
    for handler in list(_RPC_ON_LOST):
        handler(line)
    os.write(2, f"error: {line}\n".encode())
    os._exit(1)


def _guard_rpc(lib, stall_s: float) -> None:  # noqa: ANN001
    if _RPC_GUARD:
        return

    def on_abort(message: bytes | None) -> None:  # runs on llama.cpp's thread, just before abort()
        text = c_str(message)
        _rpc_fatal(explain_abort(text, _RPC_ENDPOINTS, log_lines()[-50:]))

    cb = ABORT_CB(on_abort)
    lib.ggml_set_abort_callback(cb)
    _RPC_GUARD.extend([cb, Watchdog(_RPC_ENDPOINTS, decode_busy_s, _rpc_fatal, stall_s=stall_s)])
