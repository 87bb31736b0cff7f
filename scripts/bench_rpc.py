"""Local vs RPC-split on loopback: the same pair, the target all-local or split over two
`ggml-rpc-server` processes on 127.0.0.1 (CPU backend), the draft local in both. Prints a markdown
table of decode speed and the K the tuner chose (docs/rpc.md quotes it).

    .venv/bin/python scripts/bench_rpc.py                      # models/default, ~10 min on 2 cores
    .venv/bin/python scripts/bench_rpc.py --pair DIR --max-tokens 128 --threads 1 --rtt-ms 0,2

Loopback adds almost no latency, so `--rtt-ms` also runs the split through a relay that delays
every message by half the given round trip each way, as a LAN would. On one machine the servers
share the client's cores: the figures show the shape (speed, chosen K), not a LAN's numbers.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.bench.prompts import load_prompts  # noqa: E402
from localspec.engine import Engine  # noqa: E402
from localspec.settings import DEFAULT_PAIR, Settings  # noqa: E402
from tests.rpc_servers import Servers, server_binary  # noqa: E402


class Relay:
    """127.0.0.1:<port> -> `target`, each chunk held for `delay_s` in each direction."""

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
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 20):
                time.sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):  # shutdown, not just close: the other pump may be blocked in recv on it,
            try:  # and a bare close would leave the connection open, the server serving nobody
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def run(settings: Settings, prompts: list[str], max_tokens: int) -> dict:
    with Engine(settings, log=lambda m: print(f"  {m}", file=sys.stderr)) as eng:
        eng.generate(prompts[0], max_tokens=16)  # warm-up: the tuner's probe rounds happen here
        speeds, ks = [], Counter()
        for p in prompts:
            eng.clear_cache()
            r = eng.generate(p, max_tokens=max_tokens)
            speeds.append(r.stats.decode_tok_s)
            ks.update(r.stats.k_history)
    spec = [k for k, n in ks.items() for _ in range(n) if k]
    return {
        "tok_s": statistics.median(speeds),
        "mean_k": statistics.mean(spec) if spec else 0.0,
        "plain_share": ks.get(0, 0) / max(1, sum(ks.values())),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", type=Path, default=DEFAULT_PAIR)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per rpc-server and for the client")
    ap.add_argument("--rtt-ms", default="0", help="emulated round trips to run the split at, e.g. 0,2")
    ap.add_argument("--no-local", action="store_true", help="only the split configurations")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one configuration (--rpc value)
    args = ap.parse_args()
    prompts = [p.text for p in load_prompts()][: args.prompts]
    base = Settings.load(pair=args.pair, temperature=0.0, n_ctx=1024, n_threads=args.threads)
    if args.one is not None:  # llama.cpp keeps rpc-servers registered: one process per configuration
        rpc = args.one or None
        out = [run(base.replace(spec=False, rpc=rpc), prompts, args.max_tokens)]
        out.append(run(base.replace(rpc=rpc), prompts, args.max_tokens))
        print(json.dumps(out))
        return
    binary = server_binary()
    if binary is None:
        sys.exit("ggml-rpc-server not found: run scripts/build_rpc_server.sh")
    servers = Servers(binary, n=2, threads=args.threads)
    print("| target | plain tok/s | auto-K tok/s | mean K chosen | plain steps (fallback) |")
    print("|---|---:|---:|---:|---:|", flush=True)
    try:
        configs = [] if args.no_local else [("local", "")]
        for rtt in (float(x) for x in args.rtt_ms.split(",")):
            rpc = servers.rpc
            if rtt > 0:  # a server serves one client: each relay feeds its server a single connection
                rpc = ",".join(Relay(e, rtt / 2e3).endpoint for e in servers.endpoints)
            configs.append(("RPC split" + (f", {rtt:g} ms RTT" if rtt else ", loopback"), rpc))
        for label, rpc in configs:
            print(label, file=sys.stderr)
            argv = [sys.argv[0], "--pair", str(args.pair), "--max-tokens", str(args.max_tokens)]
            argv += ["--prompts", str(args.prompts), "--threads", str(args.threads), "--one", rpc]
            res = subprocess.run([sys.executable, *argv], stdout=subprocess.PIPE, text=True, check=True)
            p, a = json.loads(res.stdout)
            print(
                f"| {label} | {p['tok_s']:.1f} | {a['tok_s']:.1f} | {a['mean_k']:.1f} | {a['plain_share']:.0%} |",
                flush=True,
            )
    finally:
        servers.close()


if __name__ == "__main__":
    main()
