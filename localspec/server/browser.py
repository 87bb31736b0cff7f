"""What a web page in the user's browser may do with the server: by default, nothing but what its
own pages do. A page on another site can reach loopback too, so:

- the Host header must name this server (loopback, the listening address, --allowed-hosts): a DNS
  rebinding page, whose own name now points at 127.0.0.1, is refused (Starlette's
  TrustedHostMiddleware decides; the refusal is answered in OpenAI's shape, naming the flag);
- no CORS grants unless --cors-origins names the origins (Starlette's CORSMiddleware);
- a POST must say it is JSON (FastAPI parses nothing else: a cross-site "simple" request with a
  text/plain body gets 415, see errors.py), so a page cannot start a generation without a preflight.
"""

from __future__ import annotations

import ipaddress
import socket

from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from localspec.config.settings import Settings
from localspec.server import errors
from localspec.serving.errors import APIError

LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_BINDS = ("0.0.0.0", "::", "")
_PASSED = "localspec.host_ok"


def _literal(host: str) -> str:
    """A host as a Host header carries it: IPv6 addresses in brackets, without a zone."""
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return host.lower()
    return f"[{ip}]" if ip.version == 6 else str(ip)


def allowed_hosts(settings: Settings) -> list[str]:
    """The Host values this server answers: loopback, the address it listens on (every address of
    this machine and its names when that is a wildcard), and --allowed-hosts."""
    hosts = [*LOOPBACK, *settings.allowed_hosts]
    if settings.host in WILDCARD_BINDS:
        import psutil  # noqa: PLC0415 - only for a server open to the network

        hosts += [socket.gethostname(), socket.getfqdn()]
        hosts += [a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family in (
            socket.AF_INET, socket.AF_INET6)]  # fmt: skip
    else:
        hosts.append(settings.host)
    return list(dict.fromkeys(_literal(h) for h in hosts if h))


class HostCheck:
    """TrustedHostMiddleware's verdict, its refusal in the dialect's shape with the flag that fixes it."""

    def __init__(self, app: ASGIApp, hosts: list[str]) -> None:
        self.app = app
        self.check = TrustedHostMiddleware(self._through, allowed_hosts=hosts, www_redirect=False)

    async def _through(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[_PASSED] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # websockets (none today) get TrustedHostMiddleware's own answer
            return await (self.check if scope["type"] == "websocket" else self.app)(scope, receive, send)

        async def checked(message: dict) -> None:
            if scope.get(_PASSED):
                await send(message)
            elif message["type"] == "http.response.start":  # TrustedHostMiddleware's plain 400
                await self._refusal(scope)(scope, receive, send)

        await self.check(scope, receive, checked)

    @staticmethod
    def _refusal(scope: Scope):  # noqa: ANN205 - a Response
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")[:100]
        error = APIError(
            400,
            f"the Host header {host!r} does not name this server; if clients reach it by that name, "
            "start it with --allowed-hosts NAME (a check against DNS rebinding)",
            code="host_not_allowed",
        )
        return errors.respond(scope, error)


def install(app: ASGIApp, settings: Settings) -> None:
    """The Host check outermost, then CORS (answers preflights) when origins are given."""
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            # Anthropic's SDKs in a browser send their version, betas and key as headers
            allow_headers=[
                "authorization",
                "content-type",
                "x-api-key",
                "anthropic-version",
                "anthropic-beta",
                "anthropic-dangerous-direct-browser-access",
            ],
            max_age=600,
        )
    app.add_middleware(HostCheck, hosts=allowed_hosts(settings))
