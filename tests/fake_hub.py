"""A small Hugging Face Hub on loopback for the real huggingface_hub client (HF_ENDPOINT=url).

It answers what hf_hub_download, model_info and snapshot_download ask (read from huggingface_hub's
file_download.py / hf_api.py / _snapshot_download.py):
  HEAD|GET /{repo}/resolve/{rev}/{file}   X-Repo-Commit, ETag (the sha256 for LFS-like files),
                                          Content-Length; GET honours Range: bytes=N-[M] with a 206
  GET /api/models/{repo}[/revision/{rev}] {"id", "sha", "siblings": [{"rfilename", "size", "lfs"}]}
  GET /api/models/{repo}/tree/{rev}       [{"type": "file", "path", "size", "oid", "lfs"}]
Unknown repos and files get 404 with the X-Error-Code the client maps to its exceptions.
Faults for tests: `cut_once` sends half of a file's first GET and drops the connection; `fail`
answers a file's GETs with 500.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_LFS = (".gguf", ".safetensors")


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.cut_once: set[tuple[str, str]] = set()
        self.fail: set[tuple[str, str]] = set()
        self._server: ThreadingHTTPServer | None = None

    def add(self, repo: str, files: dict[str, bytes]) -> None:
        self.repos[repo] = dict(files)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def gets(self, file: str) -> list[str | None]:
        """The Range headers of the GETs for `file` so far (None: a whole-file GET)."""
        return [r for m, p, r in self.requests if m == "GET" and p.endswith("/" + file)]

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # -- routing -----------------------------------------------------------------------------
    def _route(self, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.hub.requests.append(("HEAD" if head else "GET", path, self.headers.get("Range")))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+)(/.*)?)?", path)
        if m:
            return self._api(m.group(1), m.group(2) or "revision")
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._file(m.group(1), m.group(3), head)
        self._error(404, "RepoNotFound")

    def _api(self, repo: str, what: str) -> None:
        files = self.hub.repos.get(repo)
        if files is None:
            return self._error(404, "RepoNotFound")
        if what == "revision":
            siblings = [
                {"rfilename": f, "size": len(d), "blobId": _oid(d), **_lfs(f, d, "sha256")}
                for f, d in files.items()
            ]
            body: object = {"id": repo, "sha": COMMIT, "siblings": siblings}
        else:
            body = [
                {"type": "file", "path": f, "size": len(d), "oid": _oid(d), **_lfs(f, d, "oid")}
                for f, d in files.items()
            ]
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _file(self, repo: str, name: str, head: bool) -> None:
        files = self.hub.repos.get(repo)
        if files is None:
            return self._error(404, "RepoNotFound")
        if name not in files:
            return self._error(404, "EntryNotFound")
        data = files[name]
        key = (repo, name)
        if not head and key in self.hub.fail:
            return self._error(500, None)
        start, end = 0, len(data)
        rng = self.headers.get("Range")
        if not head and rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
            assert m, rng
            start, end = int(m.group(1)), min(end, int(m.group(2) or end - 1) + 1)
        partial = (start, end) != (0, len(data))
        self.send_response(206 if partial else 200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{_sha256(data) if name.endswith(_LFS) else _oid(data)}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if head:
            return
        if key in self.hub.cut_once and not rng:  # a whole-file download, not a header probe
            self.hub.cut_once.discard(key)
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # mid-body: the client sees a short read
            return
        self.wfile.write(data[start:end])

    def _error(self, status: int, code: str | None) -> None:
        raw = json.dumps({"error": code or "server error"}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def _lfs(name: str, data: bytes, sha_key: str) -> dict[str, object]:
    if not name.endswith(_LFS):
        return {}
    return {"lfs": {sha_key: _sha256(data), "size": len(data), "pointerSize": 134}}
