"""`localspec bench --concurrency 1,2,4`: N requests at once, plain and speculative, on one Engine
with N slots; with `--peer`, llama.cpp's `llama-server -np N` on the same pair, draft lengths and
prompts. Reports aggregate tok/s (every token of the wave over its wall time), per-request tok/s
and time to first token.

The prompts are served in waves of N (all N submitted together, the next wave when the last one
ends), so "N = 1" is the same requests one after another: the serial baseline.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from statistics import mean
from typing import Callable, Sequence

from localspec.bench import peer as peer_mod
from localspec.bench.prompts import FittedPrompt
from localspec.bench.runner import BenchConfig
from localspec.errors import LocalspecError


@dataclass(frozen=True)
class RequestResult:
    prompt_id: str
    n_generated: int
    ttft_s: float  # submit -> first text
    total_s: float  # submit -> end

    @property
    def tok_s(self) -> float:
        return self.n_generated / self.total_s if self.total_s > 0 else 0.0


@dataclass(frozen=True)
class WaveResult:
    side: str
    config: str
    concurrency: int
    run: int
    wall_s: float
    requests: list[RequestResult]

    @property
    def n_tokens(self) -> int:
        return sum(r.n_generated for r in self.requests)


@dataclass(frozen=True)
class ConcurrencyRow:
    side: str
    config: str
    concurrency: int
    aggregate_tok_s: float
    per_request_tok_s: float
    ttft_ms: float
    n_requests: int
    n_tokens: int

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(waves: Sequence[WaveResult]) -> list[ConcurrencyRow]:
    rows: dict[tuple[str, str, int], list[WaveResult]] = {}
    for w in waves:
        rows.setdefault((w.side, w.config, w.concurrency), []).append(w)
    out = []
    for (side, config, n), ws in rows.items():
        reqs = [r for w in ws for r in w.requests]
        tokens = sum(w.n_tokens for w in ws)
        out.append(
            ConcurrencyRow(
                side,
                config,
                n,
                aggregate_tok_s=tokens / sum(w.wall_s for w in ws),
                per_request_tok_s=mean(r.tok_s for r in reqs),
                ttft_ms=1e3 * mean(r.ttft_s for r in reqs),
                n_requests=len(reqs),
                n_tokens=tokens,
            )
        )
    return out


def waves(prompts: Sequence[FittedPrompt], n: int) -> list[list[FittedPrompt]]:
    """The prompts in groups of n (a last partial group is left out: every wave runs n at once)."""
    if len(prompts) < n:
        raise LocalspecError(f"--concurrency {n} needs at least {n} prompts (the set has {len(prompts)})")
    k = len(prompts) // n * n
    return [list(prompts[i : i + n]) for i in range(0, k, n)]


# -- localspec ------------------------------------------------------------------------------------
def engine_wave(
    engine,
    cfg: BenchConfig,
    prompts: Sequence[FittedPrompt],
    *,
    temperature: float,
    gen_tokens: int,
    seed: int,
) -> tuple[float, list[RequestResult]]:  # noqa: ANN001, E501
    """Submit every prompt at once and drain the handles side by side."""
    engine.clear_cache()  # every request pays its own prefill
    overrides = dict(max_tokens=gen_tokens, stop=(), temperature=temperature, spec=cfg.spec)
    if cfg.spec:
        overrides["draft_max"] = cfg.draft_max
    t0 = time.perf_counter()
    handles = [engine.submit(list(p.tokens), seed=seed + i, **overrides) for i, p in enumerate(prompts)]

    def drain(i: int) -> RequestResult:
        first = None
        for chunk in handles[i]:
            if first is None and chunk.tokens:
                first = time.perf_counter()
        end = time.perf_counter()
        n = handles[i].response.stats.n_generated
        return RequestResult(prompts[i].id, n, (first or end) - t0, end - t0)

    return _side_by_side(drain, len(prompts), t0)


def _side_by_side(fn: Callable[[int], RequestResult], n: int, t0: float) -> tuple[float, list[RequestResult]]:
    """fn(0..n-1) in n threads at once; the wave's wall time since t0 and the results in order. The
    first error raises here, in the caller's thread."""
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(fn, range(n)))
    return time.perf_counter() - t0, results


# -- llama.cpp's server ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PeerServer:
    """llama-server -np N for one configuration (plain, or the draft at a fixed K), as a context manager."""

    def __init__(
        self, ps: peer_mod.PeerSettings, n_parallel: int, k: int | None, *, bin_dir: Path | None = None
    ) -> None:  # noqa: E501
        self.port = _free_port()
        self.cmd = peer_mod.server_cmd(ps, n_parallel, k, port=self.port, bin_dir=bin_dir)
        self.timeout_s = ps.timeout_s
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "PeerServer":
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = "\n".join(
                    (self.proc.stderr.read() if self.proc.stderr else "").strip().splitlines()[-5:]
                )
                raise LocalspecError(f"llama-server exited (code {self.proc.returncode}):\n{tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise LocalspecError(f"llama-server did not become ready within {self.timeout_s:.0f} s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()

    def complete(
        self,
        text: str,
        *,
        gen_tokens: int,
        temperature: float,
        seed: int,
        ps: peer_mod.PeerSettings,
        json_schema: str | None = None,
    ) -> dict:
        body = {
            "prompt": text,
            "n_predict": gen_tokens,
            "seed": seed,
            "cache_prompt": False,
            "ignore_eos": False,
            **peer_mod.server_sampling(ps, temperature),
        }
        if json_schema is not None:  # llama-server converts it to its grammar, as for response_format
            body["json_schema"] = json.loads(json_schema)
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
            return json.loads(r.read())


def peer_wave(
    server: PeerServer,
    ps: peer_mod.PeerSettings,
    prompts: Sequence[FittedPrompt],
    texts: Callable[[FittedPrompt], str],
    *,
    temperature: float,
    gen_tokens: int,
    seed: int,
) -> tuple[float, list[RequestResult]]:  # noqa: E501
    t0 = time.perf_counter()

    def one(i: int) -> RequestResult:
        try:
            out = server.complete(
                texts(prompts[i]), gen_tokens=gen_tokens, temperature=temperature, seed=seed + i, ps=ps
            )
        except Exception as e:  # noqa: BLE001 - the peer's failure, as one line
            raise LocalspecError(f"llama-server request failed: {e}") from None
        end = time.perf_counter()
        tm = out.get("timings", {})
        n = int(tm.get("predicted_n", out.get("tokens_predicted", 0)))
        # no stream: the first token is taken to come when the server's prompt pass ends
        wait = max(end - t0 - (tm.get("prompt_ms", 0.0) + tm.get("predicted_ms", 0.0)) / 1e3, 0.0)
        return RequestResult(prompts[i].id, n, wait + tm.get("prompt_ms", 0.0) / 1e3, end - t0)

    return _side_by_side(one, len(prompts), t0)


def run_concurrency(
    engine,  # noqa: ANN001 - engine.Engine with max(levels) slots
    prompts: Sequence[FittedPrompt],
    configs: Sequence[BenchConfig],
    levels: Sequence[int],
    *,
    temperature: float,
    gen_tokens: int,
    runs: int,
    warmup: int,
    seed: int,
    peer: peer_mod.PeerSettings | None = None,
    peer_texts: Callable[[FittedPrompt], str] | None = None,
    peer_k: Sequence[int] = (),
    progress: Callable[[str], None] | None = None,
) -> list[WaveResult]:
    say = progress or (lambda _m: None)
    out: list[WaveResult] = []
    for n in levels:
        groups = waves(prompts, n)
        with ExitStack() as stack:
            # llama-server at every K stays loaded beside our engine (idle, it costs nothing), so the
            # two sides' waves interleave and the machine's drift hits both alike
            peers: list[tuple[str, PeerServer]] = []
            if peer is not None and peer_texts is not None:
                for k in [None, *peer_k]:
                    name = "plain" if k is None else f"K={k}"
                    say(f"llama-server -np {n} {name}: loading")
                    peers.append((name, stack.enter_context(PeerServer(peer, n, k))))

            same = dict(temperature=temperature, gen_tokens=gen_tokens)
            sides = [("localspec", c.name, partial(engine_wave, engine, c, **same)) for c in configs]
            sides += [
                ("llama-server", name, partial(peer_wave, server, peer, texts=peer_texts, **same))
                for name, server in peers
            ]
            for w in range(warmup):
                for side, name, wave in sides:
                    say(f"warm-up {w + 1}/{warmup} {side} {name} x{n}")
                    wave(groups[0], seed=seed)
            for run in range(runs):
                for side, name, wave in sides:  # interleaved: drift hits every configuration alike
                    say(f"T={temperature:g} run {run + 1}/{runs} {side} {name} x{n}")
                    for g in groups:
                        wall, reqs = wave(g, seed=seed + 1000 * run)
                        out.append(WaveResult(side, name, n, run, wall, reqs))
    return out


def print_table(rows: Sequence[ConcurrencyRow], console=None) -> None:  # noqa: ANN001
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    console = console or (Console() if Console().is_terminal else Console(width=150))
    t = Table(title="Concurrent requests (aggregate = all tokens of a wave / its wall time)")
    for col in (
        "side",
        "config",
        "N",
        "aggregate tok/s",
        "vs N=1",
        "per-request tok/s",
        "TTFT ms",
        "requests",
    ):
        t.add_column(col, justify="left" if col in ("side", "config") else "right")
    serial = {(r.side, r.config): r.aggregate_tok_s for r in rows if r.concurrency == 1}
    for r in sorted(rows, key=lambda r: (r.side, r.concurrency, r.config)):
        base = serial.get((r.side, r.config))
        t.add_row(
            r.side,
            r.config,
            str(r.concurrency),
            f"{r.aggregate_tok_s:.2f}",
            f"{r.aggregate_tok_s / base:.2f}x" if base else "",
            f"{r.per_request_tok_s:.2f}",
            f"{r.ttft_ms:.0f}",
            str(r.n_requests),
        )
    console.print(t)


def markdown(rep: dict) -> str:
    """The report as Markdown tables, one per temperature, with the parameters it ran with."""
    p = rep["params"]
    lines = ["# Concurrent requests", "", "```", json.dumps(p), "```", ""]
    for t in p["temperatures"]:
        rows = [r for r in rep["rows"] if r["temperature"] == t]
        serial = {(r["side"], r["config"]): r["aggregate_tok_s"] for r in rows if r["concurrency"] == 1}
        lines += [
            f"## T = {t:g}",
            "",
            "| side | config | N | aggregate tok/s | vs N=1 | per-request tok/s | TTFT ms |",
        ]
        lines.append("|---|---|--:|--:|--:|--:|--:|")
        for r in sorted(rows, key=lambda r: (r["side"], r["concurrency"], r["config"])):
            base = serial.get((r["side"], r["config"]))
            ratio = f"{r['aggregate_tok_s'] / base:.2f}x" if base else ""
            lines.append(
                f"| {r['side']} | {r['config']} | {r['concurrency']} | {r['aggregate_tok_s']:.2f} | {ratio} "
                f"| {r['per_request_tok_s']:.2f} | {r['ttft_ms']:.0f} |"
            )
        lines.append("")
    return "\n".join(lines)
