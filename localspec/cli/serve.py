"""`localspec serve`: the OpenAI-compatible server (see localspec/server/)."""

from __future__ import annotations

import functools
import ipaddress
import signal
from importlib.util import find_spec
from typing import Any, Callable

import click
from click.core import ParameterSource

from localspec import paths
from localspec.cli import running
from localspec.cli.common import resolve_settings, settings_options
from localspec.config.settings import API_KEY_ENV, Settings, setting_fields
from localspec.errors import LocalspecError

SERVE_DEFAULTS = {"parallel": 4, "embed_ctx": 512, "prompt_cache": True}  # below config files and flags


@click.command()
@settings_options("model", "images", "sampling", "spec", "log", "server")
@click.pass_context
def serve(ctx: click.Context, **kwargs) -> None:
    """Serve the model over HTTP: OpenAI's API (/v1/chat/completions, /v1/completions, /v1/models),
    /health, /metrics and the chat page (docs/apps.md lists every endpoint). With no --pair or
    --target (or with --models-dir), every model of the models folder, each loaded when asked for."""
    key_in_argv = ctx.get_parameter_source("api_key") is ParameterSource.COMMANDLINE
    flags = dict(kwargs)  # before resolve_settings takes them: each routed model's settings start here
    settings = resolve_settings(kwargs, defaults=SERVE_DEFAULTS)
    _need_server_extras()
    import uvicorn  # noqa: PLC0415 - keep --help instant

    from localspec import llama  # noqa: PLC0415
    from localspec.engine import Engine  # noqa: PLC0415
    from localspec.llama import rpc  # noqa: PLC0415
    from localspec.server import create_app, protocol, reload, shutdown  # noqa: PLC0415

    def say(msg: str) -> None:
        click.echo(msg, err=True)

    for line in exposure_warnings(settings.host, settings.api_key) if not reload.reloads() else ():
        say(line)
    if key_in_argv:  # a re-executed server has it in its environment (reload.py)
        say(
            f"warning: --api-key on the command line is visible to every user of this machine (ps); "
            f"set {API_KEY_ENV} in the environment instead"
        )
    endpoints = settings.rpc_endpoints
    routed = settings.models_dir is not None or (settings.pair is None and settings.target is None)
    if routed:
        app, what = routing_app(settings, flags, say)
    else:
        if reload.reloads() and endpoints:  # re-executed after losing an rpc-server: wait for it (reload.py)
            reload.wait_for_servers(endpoints, rpc.probe, say)
        # loaded here, so a bad model is one `error:` line, not a traceback
        engine = Engine(settings, log=say)
        app = create_app(settings, lambda: engine)  # the app closes it on shutdown
        what = app.state.model_id
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        timeout_graceful_shutdown=shutdown.FORCE_AFTER_S,  # after the app's own grace (shutdown.py)
        http=protocol.GuardedH11,  # a deadline for reading each request: slow clients let go of
        timeout_keep_alive=protocol.KEEP_ALIVE_S,
        h11_max_incomplete_event_size=protocol.HEADER_MAX_BYTES,
    )
    server = shutdown.Server(config)  # a SIGTERM answers every request in flight in its API's shape
    lost = reload.EngineLost(say)
    if endpoints:  # llama.cpp aborts on a lost rpc-server: answer what is in flight, then reload
        lost.install(server, app)
        llama.on_rpc_lost(lost)
    # uvicorn re-raises SIGTERM after its graceful shutdown, which would kill us with 143; a handler
    # of our own is what it re-raises into, so a clean shutdown exits 0
    signal.signal(signal.SIGTERM, lambda *_: None)
    base = f"http://{_url_host(settings.host)}:{settings.port}"
    say(f"serving {what} on {base}/v1 (Ctrl-C to stop)")
    say(f"open {base}/ in a browser for the chat page")
    note = running.announce(f"http://{_url_host(_local(settings.host))}:{settings.port}", settings.port)
    try:
        server.run()
    finally:
        running.withdraw(note)
    if lost.line is not None:
        reload.reexec()
    if not server.started:
        raise SystemExit(1)  # the port was taken or the models failed to load: uvicorn said why


def routing_app(settings: Settings, flags: dict[str, Any], say: Callable[[str], None]) -> tuple[Any, str]:
    """Router mode: the app serving every model of the folder, and a line saying what it serves."""
    from localspec.server import create_app  # noqa: PLC0415
    from localspec.serving import catalog  # noqa: PLC0415
    from localspec.serving.router import Router  # noqa: PLC0415

    if settings.pair is not None or settings.target is not None:
        raise LocalspecError("give --models-dir (every model of a folder) or --pair/--target (one), not both")
    if settings.rpc_endpoints:
        raise LocalspecError(
            "router mode does not take --rpc (an rpc-server serves one process at a time, and each model "
            "has its own); serve the pair alone with --pair and --rpc"
        )
    root = settings.models_dir or paths.models_dir()
    entries, skipped = catalog.scan(root)
    for line in skipped:
        say(f"skipped {line}")
    names = [e.name for e in entries]
    if not entries:
        raise LocalspecError(f"no models in {root}: put pair folders or GGUF files there (docs/serving.md)")
    if settings.default_model is not None and settings.default_model not in names:
        raise LocalspecError(
            f"--default-model {settings.default_model!r} is not in {root}: {', '.join(names)}"
        )
    config = flags.pop("config", None)
    given = {k: v for k, v in flags.items() if k in {f.name for f in setting_fields()}}

    def make(**model: Any) -> Settings:  # a model's settings: the server's flags and config, then the pair's
        return Settings.load(config=config, defaults=SERVE_DEFAULTS, **(given | model))

    def router() -> Router:
        return Router(entries, settings, functools.partial(catalog.measure, make=make), say=say)

    app = create_app(settings, router=router)
    return app, f"{len(names)} models from {root} ({', '.join(names)}; each loaded when first asked for)"


def _local(host: str) -> str:
    """An address of this machine to reach a server listening on `host` (any address: loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _need_server_extras() -> None:
    missing = [m for m in ("fastapi", "uvicorn", "sse_starlette", "prometheus_client") if not find_spec(m)]
    if missing:
        raise LocalspecError(f"the server needs {', '.join(missing)}: pip install 'localspec[server]'")


def exposure_warnings(host: str, api_key: str | None) -> list[str]:
    lines = []
    if not _is_loopback(host):
        lines.append(
            f"warning: listening on {host}, not loopback: anyone who can reach this machine on the network "
            "can use the model"
            + ("" if api_key else " (and there is no API key)")
            + "; clients must name it by an address of this machine or a name in --allowed-hosts"
        )
    if not api_key:
        lines.append("no API key: requests are not authenticated (set --api-key or LOCALSPEC_API_KEY)")
    return lines


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: assume it may resolve off the machine
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
