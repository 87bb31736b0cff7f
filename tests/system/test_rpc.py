"""The target split over rpc-servers (issue #19): settings, the pre-load probe, placement, and real
runs against two local `ggml-rpc-server` processes (CPU backend on 127.0.0.1).

Every test that registers RPC servers runs localspec in a subprocess: llama.cpp keeps a registered
server for the life of the process, and a later test would talk to a server already stopped."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from localspec.cli.doctor import render
from localspec.config.endpoints import parse_endpoints
from localspec.config.settings import Settings
from localspec.draft_len.auto import AutoK
from localspec.engine import placement
from localspec.errors import LocalspecError
from localspec.gguf.memory_plan import GiB
from localspec.llama import rpc

from .. import sparse_gguf
from ..helpers import feed
from ..rpc_servers import Servers, free_port, need_rpc

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The history of the printing press begins"


# one thread each, as the servers have: OpenMP's spinning threads crawl on an oversubscribed machine
THREADS = ("--n-threads", "1")


def localspec(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localspec", *args, *THREADS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ---------------------------------------------------------------------------------------------------
# settings and the handshake probe (no llama.cpp)
def test_endpoints_parse_and_bad_ones_are_one_line():
    assert parse_endpoints("10.0.0.2:50052, 10.0.0.3:50052") == ("10.0.0.2:50052", "10.0.0.3:50052")
    assert parse_endpoints(["h:1", "h:1"]) == ("h:1",)
    for bad in ("10.0.0.2", "host:", ":50052", "host:port", "host:70000"):
        with pytest.raises(LocalspecError, match="HOST:PORT"):
            Settings(rpc=bad)


def test_rpc_from_toml_list(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[model]\nrpc = ["10.0.0.2:50052", "10.0.0.3:50052"]\n')
    assert Settings.load(config=cfg).rpc == "10.0.0.2:50052,10.0.0.3:50052"


def _fake_server(reply: bytes | None) -> tuple[str, socket.socket]:
    """A listener answering HELLO with `reply` (None: accept and stay silent)."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(64)
            if reply is not None:
                conn.sendall(struct.pack("<Q", len(reply)) + reply)
            else:
                time.sleep(2)

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}", srv


def test_probe_reads_the_protocol_version():
    endpoint, srv = _fake_server(bytes([7, 0, 0, 0]) + bytes(24))
    with srv:
        assert rpc.probe(endpoint).version == (7, 0, 0)


def test_probe_refuses_another_protocol_version():
    endpoint, srv = _fake_server(bytes([6, 1, 0, 0]) + bytes(24))
    with (
        srv,
        pytest.raises(LocalspecError, match=r"speaks RPC protocol 6\.1\.0, this llama\.cpp speaks 7\.0\.0"),
    ):
        rpc.probe(endpoint)


def test_probe_names_a_silent_server():
    endpoint, srv = _fake_server(None)
    with srv, pytest.raises(LocalspecError, match="did not answer within 0.5 s: it serves one client"):
        rpc.probe(endpoint, timeout=0.5)


def test_probe_names_an_unreachable_host_and_how_to_start_one():
    port = free_port()
    with pytest.raises(LocalspecError) as e:
        rpc.probe(f"127.0.0.1:{port}")
    msg = str(e.value)
    assert (
        f"127.0.0.1:{port}" in msg
        and "connection refused" in msg
        and f"ggml-rpc-server -H 0.0.0.0 -p {port}" in msg
    )


def test_abort_messages_become_one_line_naming_the_lost_server():
    dead = f"127.0.0.1:{free_port()}"
    crashed = "ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response"
    line = rpc.explain_abort(crashed, [dead])
    assert line.startswith(f"lost the connection to rpc-server at {dead} ") and "\n" not in line
    mismatch = ["rpc_dispatcher: RPC server version mismatch: 6.0.0"]
    assert "another RPC protocol (6.0.0; ours is 7.0.0)" in rpc.explain_abort(
        "handshake failed", [dead], mismatch
    )
    assert rpc.explain_abort("ggml.c:12: GGML_ASSERT(x) failed", [dead]).startswith("llama.cpp aborted: ")


def test_watchdog_ends_a_decode_stuck_on_a_dead_server():
    lines: list[str] = []
    dead = f"127.0.0.1:{free_port()}"
    dog = rpc.Watchdog([dead], busy_for=lambda: 99.0, fatal=lines.append, stall_s=1.0, period_s=0.05)
    deadline = time.monotonic() + 5
    while not lines and time.monotonic() < deadline:
        time.sleep(0.05)
    dog.stop()
    assert lines and dead in lines[0] and "stopped answering" in lines[0]


def test_watchdog_leaves_a_slow_live_server_alone():
    srv = socket.create_server(("127.0.0.1", 0))
    with srv:
        live = f"127.0.0.1:{srv.getsockname()[1]}"
        lines: list[str] = []
        dog = rpc.Watchdog([live], busy_for=lambda: 99.0, fatal=lines.append, stall_s=1.0, period_s=0.05)
        time.sleep(0.5)
        dog.stop()
    assert lines == []


# ---------------------------------------------------------------------------------------------------
# placement with remote devices (fake devices: no servers needed)
def _dev(name, kind, free_gib, backend, description="", remote=False):
    return SimpleNamespace(
        name=name,
        description=description or name,
        kind=kind,
        free_bytes=int(free_gib * GiB),
        total_bytes=int(free_gib * GiB),
        backend=backend,
        remote=remote,
    )


def _settings(**kw):
    base = dict(n_gpu_layers=-1, allow_partial_offload=False, rpc=None, spec=True, n_ctx=8192)
    ns = SimpleNamespace(**(base | kw))
    ns.rpc_endpoints = parse_endpoints(ns.rpc)
    return ns


@pytest.fixture(scope="module")
def big_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    t, dr = sparse_gguf.qwen25_32b_q4_k_m(d), sparse_gguf.qwen25_05b_q8_0(d)
    return placement.plan_for(Settings(target=t, draft=dr, **_runtime()))


def _runtime():
    return dict(n_ctx=8192, n_batch=512, n_ubatch=512, kv_type="f16", flash_attn="auto")


def test_target_split_over_two_rpc_servers_and_a_local_card_draft_pinned_local(big_pair):
    devices = [
        _dev("CPU", "cpu", 64, "CPU"),
        _dev("CUDA0", "gpu", 11, "CUDA"),
        _dev("RPC0", "gpu", 11, "RPC", "10.0.0.2:50052", remote=True),
        _dev("RPC1", "gpu", 11, "RPC", "10.0.0.3:50052", remote=True),
    ]
    s = _settings(rpc="10.0.0.2:50052,10.0.0.3:50052")
    with pytest.raises(LocalspecError):  # a 32B Q4 pair does not fit one 11 GiB card
        placement.enforce(big_pair, [d for d in devices if not d.remote], _settings())
    dec = placement.enforce(big_pair, devices, s)
    assert dec.mode == "rpc" and dec.remote == ("RPC0", "RPC1")
    assert dec.model_devices("target") == ("RPC0", "RPC1", "CUDA0")  # llama.cpp's order: remote first
    assert dec.model_devices("draft") == ("CUDA0",) and dec.draft_gpu_layers == 25
    assert dec.target_gpu_layers == 65 and "RPC split" in dec.banner


def test_cpu_only_client_keeps_the_draft_on_its_cpu(big_pair):
    devices = [
        _dev("CPU", "cpu", 64, "CPU"),
        _dev("RPC0", "gpu", 24, "RPC", "a:1", remote=True),
        _dev("RPC1", "gpu", 24, "RPC", "b:1", remote=True),
    ]
    dec = placement.enforce(big_pair, devices, _settings(rpc="a:1,b:1"))
    assert dec.model_devices("draft") == () and dec.draft_gpu_layers == 0
    assert dec.model_devices("target") == ("RPC0", "RPC1")


def test_rpc_split_too_small_is_refused_with_the_numbers(big_pair):
    devices = [_dev("CPU", "cpu", 64, "CPU"), _dev("RPC0", "gpu", 8, "RPC", "a:1", remote=True)]
    with pytest.raises(
        LocalspecError, match="does not fit.*add rpc-servers, or pass --allow-partial-offload"
    ):
        placement.enforce(big_pair, devices, _settings(rpc="a:1"))


def test_servers_registered_but_not_asked_for_are_kept_off(big_pair):
    devices = [_dev("CPU", "cpu", 64, "CPU"), _dev("RPC0", "gpu", 80, "RPC", "a:1", remote=True)]
    dec = placement.enforce(big_pair, devices, _settings())
    assert dec.mode == "cpu" and dec.model_devices("target") == () and dec.model_devices("draft") == ()


def test_a_remote_verify_makes_the_tuner_draft_longer():
    """A remote verify costs a network round trip per pass on top of the same compute: a dearer,
    flatter curve in the batch size. The tuner needs nothing new to answer it with a longer K."""
    local = lambda n: 0.020 + 0.004 * n  # noqa: E731 - a local CPU-ish verify
    remote = lambda n: 0.020 + 0.004 * n + 0.060  # noqa: E731 - the same + 60 ms of network
    k_local = feed(AutoK(), 0.85, 0.004, local).best_k()
    k_remote = feed(AutoK(), 0.85, 0.004, remote).best_k()
    assert k_remote > k_local, (k_local, k_remote)


# ---------------------------------------------------------------------------------------------------
# real runs against two local rpc-servers
@pytest.fixture(scope="module")
def servers():
    s = Servers(need_rpc())
    yield s
    s.close()


def test_unreachable_server_is_one_line_before_loading(smollm2_path):
    need_rpc()
    port = free_port()
    r = localspec("run", "--target", str(smollm2_path), "--rpc", f"127.0.0.1:{port}", "hi", timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [r.stderr.strip()], r.stderr  # one line
    assert f"127.0.0.1:{port}" in r.stderr and "ggml-rpc-server" in r.stderr


def test_a_server_of_another_protocol_version_is_one_line_before_loading(smollm2_path):
    need_rpc()
    endpoint, srv = _fake_server(bytes([6, 1, 0, 0]) + bytes(24))  # llama.cpp would abort on its handshake
    with srv:
        r = localspec("run", "--target", str(smollm2_path), "--rpc", endpoint, "hi", timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [r.stderr.strip()], r.stderr  # one line
    assert (
        f"rpc-server at {endpoint} speaks RPC protocol 6.1.0" in r.stderr
        and "build_rpc_server.sh" in r.stderr
    )


def _greedy(smollm2_path, *extra: str) -> tuple[list[int], str]:
    args = ["run", "--target", str(smollm2_path), "--draft", str(smollm2_path), "--temperature", "0"]
    r = localspec(*args, "--max-tokens", "40", "--n-ctx", "512", "--json", *extra, PROMPT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["tokens"], r.stderr


def test_split_target_generates_what_the_local_one_does(servers, smollm2, smollm2_path):
    split, log = _greedy(smollm2_path, "--rpc", servers.rpc)
    local, _ = _greedy(smollm2_path)
    assert "RPC split: target over RPC0 + RPC1; draft on the CPU (local)" in log
    if split != local:  # allowed only where the top two logits are a near-tie (float sums differ)
        i = next(i for i, (a, b) in enumerate(zip(split, local)) if a != b)
        from localspec.llama import Context

        with Context(smollm2, n_ctx=512) as ctx:
            ids = smollm2.tokenize(PROMPT) + local[:i]
            row = np.sort(ctx.eval(ids, 0, 1)[0])
        assert row[-1] - row[-2] < 0.05, (i, row[-1] - row[-2])


def test_doctor_lists_remote_devices_and_where_each_layer_went(servers, smollm2_path):
    args = ["doctor", "--target", str(smollm2_path), "--draft", str(smollm2_path), "--rpc", servers.rpc]
    r = localspec(*args, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    remote = {d["name"]: d for d in out["devices"] if d["remote"]}
    assert sorted(d["description"] for d in remote.values()) == sorted(servers.endpoints)
    assert all(d["total_bytes"] > 0 and d["free_bytes"] > 0 for d in remote.values())
    assert out["decision"]["mode"] == "rpc" and out["decision"]["draft_devices"] == []
    target, draft = out["verified"]["models"]
    by_dev = target["seen"]["layers_by_device"]
    n_layers = target["n_layers"]
    assert set(remote) <= set(by_dev)  # both servers hold layers
    assert sorted(i for ls in by_dev.values() for i in ls) == list(range(n_layers))
    assert target["layers_on_accel"] == n_layers and out["verified"]["problems"] == []
    assert set(draft["seen"]["layers_by_device"]) == {"CPU"}  # the draft stayed local
    assert draft["seen"]["buffers"]["KV"] and not any(
        b.startswith("RPC") for b in draft["seen"]["buffers"]["KV"]
    )
    net = out["network"]["per_batch"]
    assert [c["batch"] for c in net] == [1, 2, 4, 8, 16] and all(c["rpc_ms"] > 0 for c in net)
    table = render(out)
    assert "(rpc-server)" in table and "network" in table and "layers: RPC0 0-" in table


def test_a_server_killed_mid_generation_ends_the_run_with_one_line(smollm2_path):
    servers = Servers(need_rpc())
    try:
        args = ["run", "--target", str(smollm2_path), "--draft", str(smollm2_path), "--rpc", servers.rpc]
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "localspec",
                *args,
                *THREADS,
                "--temperature",
                "0",
                "--max-tokens",
                "1500",
                "--n-ctx",
                "2048",
                "1, 2, 3, 4, 5, 6, 7, 8,",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.read(8)  # generation has started
        assert first, proc.stderr.read() if proc.stderr else ""
        servers.kill(1)
        t0 = time.monotonic()
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the run hung after its rpc-server was killed")
        assert time.monotonic() - t0 < 45
        assert proc.returncode == 1, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("error: lost the connection to rpc-server at " + servers.endpoints[1]), err
        assert "Traceback" not in err and "ggml_abort" not in err and "GGML" not in err
    finally:
        servers.close()
