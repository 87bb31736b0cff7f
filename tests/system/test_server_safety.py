"""Other origins cannot drive the server and secrets stay secret (issue #28, findings 2 and 4): the
app in-process on SmolLM2 (Starlette's TestClient, lifespan included) for what a browser sends, and
`localspec serve` processes for the command line, the acceptance log and slow clients."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from localspec.chat import bounded
from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.errors import LocalspecError
from localspec.server import create_app
from localspec.server.protocol import READ_TIMEOUT_S

from ..helpers import Server, logged, metric_samples

KEY = "sk-test-0123456789abcdef"
LOOPING = "{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}"


class Shared:
    """The module's engine, lent to several apps: none of them may close it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __getattr__(self, name: str):  # noqa: ANN204
        if name == "close":
            raise AttributeError(name)
        return getattr(self._engine, name)


@pytest.fixture(scope="module")
def engine(smollm2_path):
    with Engine(Settings(target=smollm2_path, n_ctx=512, parallel=2, no_log=True)) as e:
        yield e


def client_for(engine, base_url: str = "http://127.0.0.1:8080", **settings) -> TestClient:
    s = Settings(**{"target": engine.settings.target, "n_ctx": 512, "parallel": 2, "temperature": 0,
                    "no_log": True, **settings})  # fmt: skip
    return TestClient(create_app(s, lambda: Shared(engine)), base_url=base_url)


COMPLETION = {"prompt": "Hi", "max_tokens": 2}


# -- finding 4: another site's page ------------------------------------------------------------------
def test_the_host_header_must_name_this_server(engine):
    with client_for(engine) as c:
        for host in ("localhost", "127.0.0.1", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST"):
            assert c.get("/health", headers={"host": host}).status_code == 200, host
        # a DNS-rebinding page: its own name now resolves to 127.0.0.1, the browser sends it as Host
        for path, method in (
            ("/health", "GET"),
            ("/metrics", "GET"),
            ("/", "GET"),
            ("/v1/completions", "POST"),
        ):
            r = c.request(method, path, json=COMPLETION, headers={"host": "rebind.attacker.example:8080"})
            assert r.status_code == 400, (path, r.text)
            err = r.json()["error"]
            assert err["code"] == "host_not_allowed" and "--allowed-hosts" in err["message"]
    with client_for(engine, allowed_hosts=("box.local", "*.lan.example")) as c:
        for host in ("box.local:8080", "gpu.lan.example", "localhost"):
            assert c.get("/health", headers={"host": host}).status_code == 200, host
        assert c.get("/health", headers={"host": "lan.example.evil"}).status_code == 400
    with client_for(engine, host="10.1.2.3") as c:  # the listening address is a name it has
        assert c.get("/health", headers={"host": "10.1.2.3:8080"}).status_code == 200


def test_a_post_that_is_not_json_is_415(engine):
    """A cross-site 'simple' request (text/plain, no preflight) must not start a generation."""
    with client_for(engine) as c:
        body = json.dumps(COMPLETION)
        for ctype in (
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            None,
        ):
            headers = {"content-type": ctype} if ctype else {}
            r = c.post("/v1/completions", content=body, headers=headers)
            assert r.status_code == 415, (ctype, r.text)
            assert r.json()["error"]["code"] == "unsupported_media_type"
        before = metric_samples(c.get("/metrics").text)
        assert before["vllm:request_success_total{finished_reason=length}"] == 0.0  # nothing ran
        r = c.post(
            "/v1/completions", content=body, headers={"content-type": "application/json; charset=utf-8"}
        )
        assert r.status_code == 200, r.text


def test_no_cors_grants_unless_origins_are_named(engine):
    preflight = {
        "origin": "http://attacker.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type",
    }
    with client_for(engine) as c:
        r = c.options("/v1/completions", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
        r = c.get("/v1/models", headers={"origin": "http://attacker.example"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    with client_for(engine, cors_origins=("http://localhost:3000",)) as c:
        r = c.options("/v1/completions", headers=preflight | {"origin": "http://localhost:3000"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        r = c.options("/v1/completions", headers=preflight)
        assert r.headers.get("access-control-allow-origin") != "http://attacker.example"
    with pytest.raises(LocalspecError, match="trailing slash"):
        Settings(cors_origins=("http://localhost:3000/",))


def test_the_schema_is_behind_the_key_and_there_are_no_docs_pages(engine):
    with client_for(engine, api_key=KEY) as c:
        assert c.get("/openapi.json").status_code == 401
        r = c.get("/openapi.json", headers={"authorization": f"Bearer {KEY}"})
        assert r.status_code == 200 and "/v1/chat/completions" in r.json()["paths"]
        for page in ("/docs", "/redoc"):
            assert c.get(page).status_code == 404


def test_a_template_that_loops_is_a_400_not_a_hung_server(engine):
    with client_for(engine) as c:
        done: dict = {}
        real = engine.target.chat_template
        engine.target.chat_template = lambda: LOOPING
        try:
            t = threading.Thread(
                target=lambda: done.update(
                    r=c.post(
                        "/v1/chat/completions",
                        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
                    )
                ),  # fmt: skip
                daemon=True,
            )
            t0 = time.monotonic()
            t.start()
            t.join(bounded.RENDER_S + 10)
            assert "r" in done, "the request hangs on the template"
        finally:
            engine.target.chat_template = real
        r = done["r"]
        assert r.status_code == 400 and "took more than" in r.json()["error"]["message"]
        assert time.monotonic() - t0 < bounded.RENDER_S + 5
        assert c.post("/v1/completions", json=COMPLETION).status_code == 200


# -- finding 2: secrets in files --------------------------------------------------------------------
def test_server_settings_never_reach_the_acceptance_log(engine, tmp_path):
    log = tmp_path / "new" / "folder" / "acc.jsonl"
    with client_for(engine, api_key=KEY, log=log, no_log=False, allowed_hosts=("box.local",)) as c:
        r = c.post(
            "/v1/completions",
            json=COMPLETION | {"temperature": 0},
            headers={"authorization": f"Bearer {KEY}"},
        )
        assert r.status_code == 200, r.text
    text = log.read_text()
    assert KEY not in text
    settings = json.loads(text)["settings"]
    assert {"api_key", "host", "port", "max_queue", "max_body", "allowed_hosts", "cors_origins"}.isdisjoint(
        settings
    )
    assert settings["temperature"] == 0
    assert log.stat().st_mode & 0o777 == 0o600
    for folder in (tmp_path / "new", tmp_path / "new" / "folder"):
        assert folder.stat().st_mode & 0o777 == 0o700


def _default_log(state):
    return state / "localspec" / "acceptance.jsonl"


def test_api_key_on_the_command_line_is_warned_about_and_logged_nowhere(smollm2_path, tmp_path):
    srv = Server(smollm2_path, "--api-key", KEY, env={"XDG_STATE_HOME": str(tmp_path)})
    try:
        out = srv.client(KEY).completions.create(model=smollm2_path.stem, prompt="Hi", max_tokens=3)
        assert out.choices
        log = _default_log(tmp_path)
        assert logged(log, lambda r: True) and KEY not in log.read_text()  # written just after
        assert log.stat().st_mode & 0o777 == 0o600 and log.parent.stat().st_mode & 0o777 == 0o700
        assert srv.stop() == 0
    finally:
        srv.stop()
    warnings = [line for line in srv.output().splitlines() if "--api-key on the command line" in line]
    assert len(warnings) == 1 and "LOCALSPEC_API_KEY" in warnings[0], srv.output()
    assert KEY not in srv.output()


def test_serve_no_log_and_slow_clients(smollm2_path, tmp_path):
    """`serve --no-log` writes nothing; a connection that never finishes its headers is closed after
    READ_TIMEOUT_S and holds up no one meanwhile; the server exits 0 on SIGTERM after it."""
    srv = Server(smollm2_path, "--no-log", env={"XDG_STATE_HOME": str(tmp_path), "LOCALSPEC_API_KEY": KEY})
    try:
        t_open = time.monotonic()
        slow = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(20)]
        for s in slow:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")  # and no more
        served: dict = {}
        client = srv.client(KEY)
        beside = threading.Thread(
            target=lambda: served.update(
                out=client.completions.create(model=smollm2_path.stem, prompt="Hi", max_tokens=3)
            )
        )
        beside.start()
        for s in slow:
            s.settimeout(max(0.1, t_open + READ_TIMEOUT_S + 5 - time.monotonic()))
            assert s.recv(100) == b""  # closed by the server
            s.close()
        assert READ_TIMEOUT_S - 1 < time.monotonic() - t_open < READ_TIMEOUT_S + 5
        beside.join(300)
        assert served["out"].choices  # served beside them
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 200
        assert not _default_log(tmp_path).exists()
        assert srv.stop() == 0
    finally:
        srv.stop()
    assert "--api-key on the command line" not in srv.output()


def test_the_restart_path_moves_the_key_off_the_command_line():
    """What server/reload.py re-executes (the whole path, an rpc-server lost, is test_rpc_serve)."""
    from localspec.server.reload import without_api_key

    argv = ["-m", "localspec", "serve", "--api-key", KEY, "--port", "8080", "--api-key=" + KEY + "2"]
    assert without_api_key(argv) == (["-m", "localspec", "serve", "--port", "8080"], KEY + "2")
    assert without_api_key(["-m", "localspec", "serve"]) == (["-m", "localspec", "serve"], None)


# -- #48: a pair folder is downloaded from strangers -------------------------------------------------
def test_a_pair_file_cannot_open_the_server_or_redirect_its_files(smollm2_path, tmp_path):
    """Its pair.toml set host, allowed_hosts, cors_origins, log and rpc: any web page could drive the
    model and append what it chose to a file the user sources. Each is ignored, with a warning."""
    sourced = tmp_path / "sourced-by-the-user.sh"
    pair = tmp_path / "pair"
    pair.mkdir()
    (pair / "pair.toml").write_text(
        f'[pair]\ntarget = "{smollm2_path}"\ndraft = "{smollm2_path}"\n[runtime]\n'
        f'allowed_hosts = ["*"]\ncors_origins = ["*"]\nlog = "{sourced}"\nno_log = false\n'
        'rpc = "203.0.113.9:50052"\napi_key = "the-authors-key"\ndraft_max = "2"\n'
    )
    srv = Server(pair, env={"XDG_STATE_HOME": str(tmp_path / "state")})
    try:
        evil = {"host": "attacker.example", "origin": "http://attacker.example"}
        r = httpx.post(
            srv.url + "/v1/completions", json=COMPLETION | {"stop": ["$(touch /tmp/pwned)"]}, headers=evil
        )
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        r = httpx.post(srv.url + "/v1/completions", json=COMPLETION, timeout=60)  # no key wanted: none is set
        assert r.status_code == 200, r.text
        assert srv.stop() == 0
    finally:
        srv.stop()
    out = srv.output()
    for key in ("allowed_hosts", "cors_origins", "log", "no_log", "rpc", "api_key"):
        assert f"[runtime] {key} ignored" in out, out
    assert "the-authors-key" not in out and not sourced.exists()


def test_health_tells_the_model_only_to_a_caller_with_the_key(engine):
    """Anyone may ask whether the server lives; which model it runs and how busy it is are for
    callers with the key (#48)."""
    with client_for(engine, api_key=KEY) as c:
        assert c.get("/health").json() == {"status": "ok"}
        full = c.get("/health", headers={"authorization": f"Bearer {KEY}"}).json()
        assert full["status"] == "ok" and full["model"] and {"running", "waiting"} <= set(full)
    with client_for(engine) as c:  # no key set: nothing to keep from anyone
        assert "model" in c.get("/health").json()
