"""What the dialect adapters (issue #46) add to a streamed reply's time per token: the same streamed
chat/completions request against two checkouts' `localspec serve`, interleaved (A, B, B, A, ...), on
the same model, one request at a time; or, with one checkout and --b-dialect responses, the same
request as chat/completions (A) and as the Responses API (B) to one server.

    .venv/bin/python research/server_adapter_latency.py /work/main . --model models/default
    .venv/bin/python research/server_adapter_latency.py . --b-dialect responses

Each checkout serves with its own venv (CHECKOUT/.venv/bin/python). The figure per request is the
client's view: (last content chunk - first content chunk) / (completion tokens - 1), greedy, so
both sides write the same tokens; the answer is the B/A ratio per pair of requests (a shared
machine's noise hits both sides of a pair alike), summarised by its median and quartiles; beside
it the server process's CPU seconds per token (psutil), less sensitive to other processes' load.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

import httpx
import psutil

PROMPT = "Write a long, detailed story about a lighthouse keeper and a storm."


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(checkout: Path, model: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    port = _port()
    what = ["--pair", str(model)] if model.is_dir() else ["--target", str(model)]
    cmd = [str(checkout / ".venv/bin/python"), "-m", "localspec", "serve", *what, "--port", str(port),
           "--parallel", "1", "--no-log", *extra]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_API_KEY"}
    proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{checkout}: the server did not come up")


def _chat(chunk: dict) -> tuple[str | None, int | None]:
    """A chat/completions chunk's (content, completion tokens)."""
    content = chunk["choices"][0]["delta"].get("content") if chunk["choices"] else None
    return content, chunk["usage"]["completion_tokens"] if chunk.get("usage") else None


def _responses(event: dict) -> tuple[str | None, int | None]:
    """A Responses event's (text delta, output tokens)."""
    if event["type"] == "response.output_text.delta":
        return event["delta"], None
    done = event["type"] in ("response.completed", "response.incomplete")
    return None, event["response"]["usage"]["output_tokens"] if done else None


DIALECTS = {  # the same request in each dialect: (path, body, reader of one event)
    "chat": ("/v1/chat/completions", lambda n: {
        "messages": [{"role": "user", "content": PROMPT}], "max_tokens": n, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True}}, _chat),
    "responses": ("/v1/responses", lambda n: {
        "input": [{"role": "user", "content": PROMPT}], "max_output_tokens": n, "temperature": 0,
        "stream": True}, _responses),
}  # fmt: skip


def one(url: str, max_tokens: int, dialect: str = "chat") -> tuple[float, float, int, str]:
    """(seconds per token after the first, seconds to the first, tokens, text) of one streamed reply."""
    path, body, read = DIALECTS[dialect]
    t0 = time.perf_counter()
    first = last = None
    n, text = 0, []
    with httpx.stream("POST", url + path, json=body(max_tokens), timeout=300) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            content, tokens = read(json.loads(line[6:]))
            n = tokens or n
            if content:
                last = time.perf_counter()
                first = first or last
                text.append(content)
    return (last - first) / (n - 1), first - t0, n, "".join(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, help="the baseline checkout (main)")
    ap.add_argument("b", type=Path, nargs="?", help="the changed checkout (default: A's server for both)")
    ap.add_argument("--b-dialect", choices=DIALECTS, default="chat", help="the dialect B's requests speak")
    ap.add_argument("--model", type=Path, default=Path("models/default"))
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--serve-args", default="", help="more `serve` flags for both sides")
    args = ap.parse_args()
    model = args.model.resolve()
    extra = args.serve_args.split()
    servers: list[tuple[subprocess.Popen, str]] = []
    try:
        for checkout in (args.a, args.b) if args.b else (args.a,):
            servers.append(start(checkout.resolve(), model, extra))
        sides = servers if args.b else servers * 2
        measure([url for _, url in sides], [psutil.Process(p.pid) for p, _ in sides], args, model.name)
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(timeout=30)


def measure(urls: list[str], procs: list[psutil.Process], args: argparse.Namespace, name: str) -> None:
    dialects = ("chat", args.b_dialect)
    for url, dialect in zip(urls, dialects):  # warm up: first-request costs, the tuner's first rounds
        for _ in range(3):
            one(url, args.max_tokens, dialect)
    per_token: list[list[float]] = [[], []]
    ttft: list[list[float]] = [[], []]
    cpu: list[list[float]] = [[], []]  # the server process's CPU seconds per generated token
    for r in range(args.repeats):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        texts = {}
        for side in order:
            before = sum(procs[side].cpu_times()[:2])
            tpt, first, n, texts[side] = one(urls[side], args.max_tokens, dialects[side])
            cpu[side].append((sum(procs[side].cpu_times()[:2]) - before) / n)
            per_token[side].append(tpt)
            ttft[side].append(first)
        same = "" if texts[0] == texts[1] else " (the two sides wrote different text)"
        print(
            f"pair {r}: A {1e3 * per_token[0][-1]:.2f} B {1e3 * per_token[1][-1]:.2f} ms/token, "
            f"CPU A {1e3 * cpu[0][-1]:.2f} B {1e3 * cpu[1][-1]:.2f} ms/token{same}",
            flush=True,
        )
    ratios = sorted(b / a for a, b in zip(*per_token))
    q = statistics.quantiles(ratios, n=4)
    print(f"model {name}, {args.repeats} interleaved pairs, {n} tokens per reply")
    for label, side in (("A", 0), ("B", 1)):
        print(f"{label}: median {1e3 * statistics.median(per_token[side]):.2f} ms/token, "
              f"first token {1e3 * statistics.median(ttft[side]):.1f} ms")  # fmt: skip
    print(f"B/A time per token: median {statistics.median(ratios):.4f} (quartiles {q[0]:.4f}, {q[2]:.4f}), "
          f"mean {statistics.mean(ratios):.4f}")  # fmt: skip
    cr = sorted(b / a for a, b in zip(*cpu))
    cq = statistics.quantiles(cr, n=4)
    print(
        f"B/A server CPU per token: median {statistics.median(cr):.4f} (quartiles {cq[0]:.4f}, {cq[2]:.4f})"
    )
    print(f"B/A first token: median {statistics.median(sorted(b / a for a, b in zip(*ttft))):.4f}")


if __name__ == "__main__":
    main()
