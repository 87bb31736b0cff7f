"""Local `ggml-rpc-server` processes for the RPC tests (CPU backend, 127.0.0.1, free ports)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILT = ROOT / "third_party" / "rpc-build" / "bin" / "ggml-rpc-server"


def server_binary() -> Path | None:
    """LOCALSPEC_RPC_SERVER, else the one tools/build/build_rpc_server.sh built, else one on PATH."""
    env = os.environ.get("LOCALSPEC_RPC_SERVER")
    if env:
        return Path(env)
    if BUILT.exists():
        return BUILT
    found = shutil.which("ggml-rpc-server") or shutil.which("rpc-server")
    return Path(found) if found else None


def need_rpc() -> Path:
    """The server binary, or skip the test saying what is missing."""
    from localspec import llama

    if not llama.rpc_supported():
        pytest.skip("llama-cpp-python was built without -DGGML_RPC=ON (rebuild with `make setup`)")
    binary = server_binary()
    if binary is None:
        pytest.skip("ggml-rpc-server not built: run tools/build/build_rpc_server.sh (`make test` does)")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Servers:
    """n servers; `endpoints` is the --rpc value; `kill(i)` stops one, `restart(i)` starts it again."""

    def __init__(self, binary: Path, n: int = 2, threads: int = 1) -> None:
        self.binary, self.threads = binary, threads
        self.procs: list[subprocess.Popen] = []
        self.endpoints: list[str] = []
        try:
            for _ in range(n):
                port = free_port()
                self.procs.append(self._start(port))
                self.endpoints.append(f"127.0.0.1:{port}")
            for e, p in zip(self.endpoints, self.procs):
                _wait_listening(e, p)
        except BaseException:
            self.close()
            raise

    @property
    def rpc(self) -> str:
        return ",".join(self.endpoints)

    def _start(self, port: int) -> subprocess.Popen:
        return subprocess.Popen(
            [str(self.binary), "-H", "127.0.0.1", "-p", str(port), "-t", str(self.threads)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def kill(self, i: int) -> None:
        self.procs[i].kill()
        self.procs[i].wait(timeout=10)

    def restart(self, i: int) -> None:
        """A new server on the port of server i (killed before)."""
        self.procs[i] = self._start(int(self.endpoints[i].rsplit(":", 1)[1]))
        _wait_listening(self.endpoints[i], self.procs[i])

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def _wait_listening(endpoint: str, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    host, port = endpoint.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ggml-rpc-server on {endpoint} exited with {proc.returncode}")
        try:
            # a bare connect: the server takes it as a client that hangs up at once
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"ggml-rpc-server on {endpoint} did not start listening in {timeout:g} s")
