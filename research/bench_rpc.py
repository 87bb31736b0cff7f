"""Local vs RPC-split on loopback: the same pair, the target all-local or split over two
`ggml-rpc-server` processes on 127.0.0.1 (CPU backend), the draft local in both. Prints a markdown
table of the verify cost per batch size, decode speed at plain / fixed K / auto, and the K auto chose
(docs/rpc.md quotes it).

    .venv/bin/python research/bench_rpc.py                      # models/default, ~10 min on 2 cores
    .venv/bin/python research/bench_rpc.py --target models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --draft models/SmolLM2-135M-Instruct.Q4_1.gguf --rtt-ms 0,5,20 --no-local

Loopback adds almost no latency, so `--rtt-ms` runs the split through a relay that delivers every
byte half the given round trip later in each direction, as a LAN or WAN hop would (latency only, no
bandwidth limit). On one machine the servers share the client's cores: the figures show the shape
(speed, chosen K), not a LAN's numbers.
"""

from __future__ import annotations

import argparse
import json
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from localspec.bench.prompts import load_prompts
from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.paths import default_pair
from tests.rpc_servers import Servers, server_binary


class Relay:
    """127.0.0.1:<port> -> `target`; every chunk is delivered `delay_s` after it arrived, in each
    direction. Timestamps, not a sleep per chunk: a pipe with latency, so a multi-chunk transfer
    (weights at load) pays the delay once, not once per chunk."""

    def __init__(self, target: str, delay_s: float) -> None:
        self.target, self.delay_s = target, delay_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            host, port = self.target.rsplit(":", 1)
            server = socket.create_connection((host, int(port)))
            for a, b in ((client, server), (server, client)):
                a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                q: queue.SimpleQueue = queue.SimpleQueue()
                threading.Thread(target=self._read, args=(a, q), daemon=True).start()
                threading.Thread(target=self._write, args=(q, b, a), daemon=True).start()

    def _read(self, src: socket.socket, q: queue.SimpleQueue) -> None:
        try:
            while data := src.recv(1 << 20):
                q.put((time.monotonic() + self.delay_s, data))
        except OSError:
            pass
        q.put((time.monotonic() + self.delay_s, b""))  # the hang-up is delayed like the data

    def _write(self, q: queue.SimpleQueue, dst: socket.socket, src: socket.socket) -> None:
        while True:
            due, data = q.get()
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            try:
                if not data:
                    break
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):  # shutdown, not just close: the other direction may be blocked in recv on
            try:  # it, and a bare close would leave the connection open, the server serving nobody
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


MODES = {"plain": {"spec": False}, "auto": {"draft_max": "auto"}}  # else "K": a fixed draft length


def overrides(mode: str) -> dict:
    return MODES.get(mode) or {"draft_max": mode}


def run(settings: Settings, prompts: list[str], max_tokens: int, modes: list[str], chat: bool) -> dict:
    """Every mode on one engine, interleaved per prompt; auto's tuner is calibrated at load (never
    remembered: the relay's port changes every run) and warmed up by one request first."""
    with Engine(settings.replace(tuner_cache=False), log=lambda m: print(f"  {m}", file=sys.stderr)) as eng:
        known = eng.tuners.known  # the calibration's verify curve: what the tuner starts from
        eng.generate(
            prompts[0], chat=chat, max_tokens=16, **overrides("auto")
        )  # warm-up: the tuner's probe rounds
        speeds: dict[str, list[float]] = {m: [] for m in modes}
        ks: Counter = Counter()
        for p in prompts:
            for m in modes:
                eng.clear_cache()
                r = eng.generate(p, chat=chat, max_tokens=max_tokens, **overrides(m))
                speeds[m].append(r.stats.decode_tok_s)
                if m == "auto":
                    ks.update(r.stats.k_history)
    spec = [k for k, n in ks.items() for _ in range(n) if k]
    return {
        "tok_s": {m: statistics.median(v) for m, v in speeds.items()},
        "verify_ms": {n: t * 1e3 for n, t in sorted(known.verify_s.items())} if known else {},
        "draft_ms": known.draft_s * 1e3 if known and known.draft_s else None,
        "k_history": dict(sorted(ks.items())),
        "mean_k": statistics.mean(spec) if spec else 0.0,
        "plain_share": ks.get(0, 0) / max(1, sum(ks.values())),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", type=Path, default=default_pair())
    ap.add_argument("--target", type=Path, help="instead of --pair (with --draft)")
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per rpc-server and for the client")
    ap.add_argument("--rtt-ms", default="0", help="emulated round trips to run the split at, e.g. 0,5,20")
    ap.add_argument("--modes", default="plain,1,3,auto", help="plain, auto and fixed draft lengths")
    ap.add_argument("--no-local", action="store_true", help="only the split configurations")
    ap.add_argument("--chat", action="store_true", help="prompts through the chat template (instruct models)")
    ap.add_argument("--json", type=Path, help="also write every configuration's figures here")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one configuration (--rpc value)
    args = ap.parse_args()
    prompts = [p.text for p in load_prompts()][: args.prompts]
    modes = args.modes.split(",")
    models = {"target": args.target, "draft": args.draft} if args.target else {"pair": args.pair}
    if args.one is not None:  # llama.cpp keeps rpc-servers registered: one process per configuration
        base = Settings.load(**models, temperature=0.0, n_ctx=1024, n_threads=args.threads)
        print(json.dumps(run(base.replace(rpc=args.one or None), prompts, args.max_tokens, modes, args.chat)))
        return
    binary = server_binary()
    if binary is None:
        sys.exit("ggml-rpc-server not found: run tools/build/build_rpc_server.sh")
    servers = Servers(binary, n=2, threads=args.threads)
    print(
        "| target | verify ms by batch size (calibration) | "
        + " | ".join(modes)
        + " (tok/s) | auto's K: rounds |"
    )
    print("|---|---|" + "---:|" * len(modes) + "---|", flush=True)
    results = {}
    try:
        configs = [] if args.no_local else [("local", "")]
        for rtt in (float(x) for x in args.rtt_ms.split(",")):
            rpc = servers.rpc
            if rtt > 0:  # a server serves one client: each relay feeds its server a single connection
                rpc = ",".join(Relay(e, rtt / 2e3).endpoint for e in servers.endpoints)
            configs.append(("RPC split" + (f", {rtt:g} ms RTT" if rtt else ", loopback"), rpc))
        for label, rpc in configs:
            print(label, file=sys.stderr)
            argv = [sys.argv[0], "--max-tokens", str(args.max_tokens), "--modes", args.modes]
            argv += [f"--{k}={v}" for k, v in models.items()] + ["--chat"] * args.chat
            argv += ["--prompts", str(args.prompts), "--threads", str(args.threads), "--one", rpc]
            res = subprocess.run([sys.executable, *argv], stdout=subprocess.PIPE, text=True, check=True)
            r = results[label] = json.loads(res.stdout)
            curve = ", ".join(f"{n}: {v:.0f}" for n, v in r["verify_ms"].items())
            ks = ", ".join(f"K={k}: {n}" for k, n in r["k_history"].items())
            speeds = " | ".join(f"{r['tok_s'][m]:.1f}" for m in modes)
            print(f"| {label} | {curve} | {speeds} | {ks} |", flush=True)
    finally:
        servers.close()
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
