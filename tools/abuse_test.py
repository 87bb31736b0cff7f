"""Well-behaved clients beside abusive ones: does one bad client hurt the others? Runs phases
without and with abusers, interleaved (clean, abused, overloaded, clean, ...: a shared machine
drifts), and reports the well-behaved clients' throughput and errors in each, and the ratio.

    python tools/abuse_test.py --target models/SmolLM2-135M-Instruct.Q4_1.gguf   # starts a server
    python tools/abuse_test.py --base-url http://127.0.0.1:8080                   # or uses one

Well-behaved clients run in a closed loop (streamed chat completions at temperature 0); on a 503
they wait its Retry-After and send again, as a client should: a request that never succeeds is
lost. The abusers, while the well-behaved ones run ("abused" phases):
- garbage: malformed JSON, wrong types, random bytes, token ids outside the vocabulary, a POST
  that is not JSON, a Host that is not this server, unknown paths, to OpenAI's (the Responses API's
  too), Ollama's, Anthropic's (count_tokens too), the embeddings routes, /infill, fill-in-the-middle
  and raw prompts, the model routes and streams refused before their first frame - each must get a
  4xx (or the 503 of a full server: a full server refuses before it reads a request's settings);
- disconnects: streams (OpenAI's completions, Responses' and Anthropic's SSE, Ollama's NDJSON, a raw
  prompt's too) closed after their first chunk;
- slowloris: connections that send part of their headers and never the rest (the server must
  close them, serve/protocol.py).
In "costly" phases one abuser sends valid requests that are expensive to serve, one at a time (it
holds at most one slot, as one more client would): 16 stop strings of 4,096 characters; the
knobs draft_max 64 and draft_min 64 with the end of text banned by logit_bias; a logit_bias over
the whole vocabulary; the largest /tokenize and /detokenize bodies the server takes; a Responses
body of 60,000 function calls, a count_tokens of 7.8 MB, an embedding truncated from 7.8 MB and an
Ollama format schema nested 400 deep, 99,999 one-letter messages to count, a fill-in-the-middle of
six 1 MB texts and a raw prompt of 1 MB (issue 60: each froze or slowed the server before). Each must
cost the others no more than one more ordinary client would: the well-behaved keep >= 70% of their
clean throughput (`--costly-min`; the exit status says so).
And in "overloaded" phases, bursts of more requests than slots plus queue: the excess must get
503 + Retry-After. Their admitted requests are real work that shares the slots with the
well-behaved clients, so those phases report 503s and lost requests, not a throughput ratio.
After every phase the server must answer /health; a server this script started must exit 0 on
SIGTERM at the end. Exit status 1 when any of that fails or a well-behaved request is lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import httpx

PROMPTS = [
    "Explain in a paragraph why the sky is blue.",
    "Write a short story about a lighthouse keeper.",
    "List five tips for writing clear Python code.",
    "Describe how a bicycle gear system works.",
]
GARBAGE = [  # (content-type, body, extra headers)
    ("application/json", b'{"messages": [', {}),
    ("application/json", b'{"messages": "hi"}', {}),
    ("application/json", b'{"prompt": {"a": 1}, "max_tokens": "many"}', {}),
    ("application/json", b'{"prompt": [1, 2, 1000000000], "max_tokens": 4}', {}),
    ("application/json", b'{"prompt": [-5], "max_tokens": 4}', {}),
    ("application/json", b"[" * 20000 + b"]" * 20000, {}),
    ("text/plain", b'{"prompt": "hi", "max_tokens": 4}', {}),
    ("application/json", b'{"prompt": "hi", "max_tokens": 4}', {"host": "rebind.attacker.example"}),
    ("application/json", b'{"prompt": "hi", "temperature": -1}', {}),
]
# the other dialects' routes, Ollama's and embeddings: (path, content-type, body); `MODEL` is the
# served model's name, filled in by the abuser
ROUTE_GARBAGE = [
    ("/api/chat", "application/json", b'{"model": "MODEL", "messages": ['),
    ("/api/chat", "application/json", b'{"model": "MODEL", "messages": "hi", "options": {"num_ctx": 1e9}}'),
    ("/api/chat", "application/json", b'{"model": "MODEL", "messages": [5]}'),
    ("/api/generate", "application/json", b'{"model": "MODEL", "prompt": "hi", "options": {"temperature": -1}}'),
    ("/api/generate", "text/plain", b'{"model": "MODEL", "prompt": "hi"}'),
    ("/api/embed", "application/json", b'{"model": "MODEL", "input": [1, 2]}'),
    ("/api/embed", "application/json", b'{"model": "MODEL", "input": ["' + b"word " * 20000 + b'"], "truncate": false}'),
    ("/api/embeddings", "application/json", b'{"model": "MODEL", "prompt": {"a": 1}}'),
    ("/api/show", "application/json", b"{}"),
    ("/v1/embeddings", "application/json", b'{"input": [1, 1000000000]}'),
    ("/v1/embeddings", "application/json", b'{"input": [' + b'"a",' * 3000 + b'"a"]}'),
    ("/v1/embeddings", "application/json", b'{"input": "hi", "encoding_format": "int8"}'),
    ("/v1/responses", "application/json", b'{"input": 5}'),
    ("/v1/responses", "application/json", b'{"input": [{"type": "function_call", "name": "f"}]}'),
    ("/v1/responses", "application/json", b'{"input": [{"role": "user", "content": [{"type": "input_image"}]}]}'),
    ("/v1/responses", "application/json", b'{"input": "hi", "previous_response_id": "resp_1"}'),
    ("/v1/responses", "application/json",
     b'{"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}'),
    ("/v1/responses", "application/json", b'{"input": "hi", "text": {"format": {"type": "json_schema", "schema": {"type": "no"}}}}'),
    ("/v1/responses", "application/json", b'{"input": "hi", "max_output_tokens": -1}'),
    ("/v1/responses", "application/json", b'{"input": [' * 5000),
    ("/v1/messages", "application/json", b'{"max_tokens": 4, "messages": ['),
    ("/v1/messages", "application/json", b'{"max_tokens": 4, "messages": "hi"}'),
    ("/v1/messages", "application/json", b'{"max_tokens": -4, "messages": [{"role": "user", "content": "hi"}]}'),
    ("/v1/messages", "application/json", b'{"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]}'),
    ("/v1/messages", "application/json", b'{"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "thinking": 1}'),
    ("/v1/messages/count_tokens", "application/json", b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "x"}]}'),
    ("/v1/messages/count_tokens", "application/json", b'{"messages": [{"role": "assistant", "content": "hi"}]}'),
    # the routes after #48 (issue 60): fill-in-the-middle, raw prompts, the model routes, streams
    ("/infill", "application/json", b'{"input_prefix": "a"}'),
    ("/infill", "application/json", b'{"input_prefix": "a", "input_suffix": "b", "samplers": ["mirostat"]}'),
    ("/infill", "application/json", b'{"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": 5}]}'),
    ("/v1/completions", "application/json", b'{"prompt": [1, 2], "suffix": "b"}'),
    ("/api/generate", "application/json", b'{"model": "MODEL", "prompt": "a", "suffix": ["b"]}'),
    ("/api/generate", "application/json", b'{"model": "MODEL", "prompt": "a", "raw": true, "images": ["AA=="]}'),
    ("/models/load", "application/json", b'{"model": 5}'),
    ("/models/unload", "application/json", b"{}"),
    ("/v1/messages", "application/json", b'{"max_tokens": -1, "stream": true, "messages": [{"role": "user", "content": "a"}]}'),
    ("/v1/responses", "application/json", b'{"input": [], "stream": true}'),
]  # fmt: skip


@dataclass
class Phase:
    kind: str  # clean | abused | overloaded
    ok: int = 0
    lost: int = 0
    retried: int = 0  # 503s the well-behaved clients waited out
    tokens: int = 0
    wall_s: float = 0.0
    lost_samples: list[str] = field(default_factory=list)
    abuse: dict[str, int] = field(default_factory=dict)
    healthy: bool = False
    client_cpu_s: float = 0.0
    server_cpu_s: float = 0.0

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0

    def count(self, what: str, n: int = 1) -> None:
        self.abuse[what] = self.abuse.get(what, 0) + n


# -- the well-behaved -------------------------------------------------------------------------------
async def good_request(
    client: httpx.AsyncClient, args: argparse.Namespace, prompt: str, phase: Phase
) -> None:
    body = {
        "messages": [{"role": "user", "content": prompt}], "max_tokens": args.max_tokens,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    for _attempt in range(args.max_retries + 1):
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                if r.status_code == 503:
                    phase.retried += 1
                    await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                    continue
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
                usage = None
                async for line in r.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        event = json.loads(line[6:])
                        if "error" in event:
                            raise RuntimeError(f"stream error: {event['error']}")
                        usage = event.get("usage") or usage
            phase.ok += 1
            phase.tokens += usage["completion_tokens"] if usage else 0
            return
        except Exception as e:  # noqa: BLE001 - a lost request is what this measures
            phase.lost += 1
            phase.lost_samples.append(f"{type(e).__name__}: {e}"[:200])
            return
    phase.lost += 1
    phase.lost_samples.append(f"still 503 after {args.max_retries} retries")


async def good_clients(args: argparse.Namespace, phase: Phase) -> None:
    async with httpx.AsyncClient(base_url=args.base_url, headers=_auth(args), timeout=args.timeout) as client:

        async def worker(w: int) -> None:
            for i in range(args.requests_per_client):
                await good_request(client, args, PROMPTS[(w + i) % len(PROMPTS)], phase)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(args.clients)))
        phase.wall_s = time.perf_counter() - t0


# -- the abusers -----------------------------------------------------------------------------------------
async def garbage(args: argparse.Namespace, phase: Phase, stop: asyncio.Event) -> None:
    rng = random.Random(0)
    async with httpx.AsyncClient(base_url=args.base_url, headers=_auth(args), timeout=30) as client:
        model = (await _model_name(client)).encode()
        while not stop.is_set():
            kind = rng.randrange(len(GARBAGE) + len(ROUTE_GARBAGE) + 2)
            if kind < len(GARBAGE):
                ctype, body, extra = GARBAGE[kind]
                r = await client.post(
                    "/v1/completions", content=body, headers={"content-type": ctype, **extra}
                )
            elif kind < len(GARBAGE) + len(ROUTE_GARBAGE):
                path, ctype, body = ROUTE_GARBAGE[kind - len(GARBAGE)]
                r = await client.post(
                    path, content=body.replace(b"MODEL", model), headers={"content-type": ctype}
                )
            elif kind == len(GARBAGE) + len(ROUTE_GARBAGE):
                r = await client.post("/v1/chat/completions", content=rng.randbytes(rng.randrange(1, 4096)),
                                      headers={"content-type": "application/json"})  # fmt: skip
            else:
                r = await client.get(f"/v1/{rng.randbytes(8).hex()}")
            phase.count("garbage 503" if r.status_code == 503 else f"garbage {r.status_code // 100}xx")
            await asyncio.sleep(1 / args.garbage_rate)


async def disconnects(args: argparse.Namespace, phase: Phase, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=args.base_url, headers=_auth(args), timeout=60) as client:
        # OpenAI's SSE and Ollama's NDJSON streams, in turn
        streams = [
            ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 200, "stream": True}),
            ("/v1/responses", {"input": "Once upon a time", "max_output_tokens": 200, "stream": True}),
            ("/api/generate", {"model": await _model_name(client), "prompt": "Once upon a time",
                               "options": {"num_predict": 200}}),
            ("/v1/messages", {"max_tokens": 200, "stream": True, "messages": [{"role": "user", "content": "Once"}]}),
            ("/api/generate", {"model": await _model_name(client), "prompt": "<|im_start|>user\nOnce", "raw": True,
                               "options": {"num_predict": 200}}),
        ]  # fmt: skip
        i = 0
        while not stop.is_set():
            path, body = streams[i % len(streams)]
            i += 1
            try:
                async with client.stream("POST", path, json=body) as r:
                    if r.status_code == 200:
                        async for line in r.aiter_lines():
                            if line.strip():
                                break  # and leave: the connection closes mid-stream
                    phase.count("disconnected" if r.status_code == 200 else f"disconnect got {r.status_code}")
            except httpx.HTTPError as e:
                phase.count(f"disconnect {type(e).__name__}")
            await asyncio.sleep(args.disconnect_every)


async def slowloris(args: argparse.Namespace, phase: Phase, stop: asyncio.Event) -> None:
    host, port = _host_port(args.base_url)

    async def one() -> None:
        while not stop.is_set():
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Le")
            await writer.drain()
            phase.count("slowloris opened")
            try:
                while not stop.is_set():
                    try:
                        if await asyncio.wait_for(reader.read(100), 1.0) == b"":
                            phase.count("slowloris closed by the server")
                            break
                    except asyncio.TimeoutError:
                        continue
            finally:
                writer.close()

    await asyncio.gather(*(one() for _ in range(args.slowloris)))


async def overload(args: argparse.Namespace, phase: Phase, stop: asyncio.Event) -> None:
    body = {"prompt": "Hi", "max_tokens": 1}
    async with httpx.AsyncClient(base_url=args.base_url, headers=_auth(args), timeout=120) as client:
        while not stop.is_set():
            rs = await asyncio.gather(
                *(client.post("/v1/completions", json=body) for _ in range(args.burst)),
                return_exceptions=True,
            )
            for r in rs:
                if isinstance(r, BaseException):
                    phase.count(f"overload {type(r).__name__}")
                elif r.status_code == 503:
                    phase.count(
                        "overload 503" if r.headers.get("retry-after") else "overload 503 WITHOUT Retry-After"
                    )
                else:
                    phase.count(f"overload {r.status_code}")
            await asyncio.sleep(args.burst_every)


def costly_requests(n_vocab: int) -> list[tuple[str, str, dict]]:
    """(name, path, body): valid requests that cost the server the most it lets one cost."""
    no_end = {"0": -100, "1": -100, "2": -100}  # SmolLM2's <|endoftext|>, <|im_start|>, <|im_end|>
    # the most a tokenize may ask (serving/text_ops.py): 1,048,576 characters; pieces for 65,536 tokens
    text = ("the quick brown fox jumps over the lazy dog " * 24_000)[: 1 << 20]
    calls = [
        {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"} for i in range(60_000)
    ]
    big, deep = "lorem ipsum dolor sit amet " * 290_000, {"type": "string"}
    for _ in range(400):
        deep = {"type": "object", "properties": {"x": deep}}
    return [
        ("stops", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 64,
                                      "stop": [chr(ord("a") + i) * 4095 + "!" for i in range(16)]}),
        ("knobs", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 64, "draft_max": 64,
                                      "draft_min": 64, "logit_bias": no_end}),
        ("huge bias", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 64,
                                          "logit_bias": {str(i): -1.0 for i in range(n_vocab)} | no_end}),
        ("huge tokenize", "/tokenize", {"content": text}),
        ("huge pieces", "/tokenize", {"content": text[: 1 << 18], "with_pieces": True}),
        ("huge detokenize", "/detokenize", {"tokens": [28] * (1 << 20)}),
        # issue 60's: a Responses body of 60k calls, a count of 7.8 MB, an embedding cut from 7.8 MB
        ("many calls", "/v1/responses", {"input": [*calls, {"role": "user", "content": "go"}], "max_output_tokens": 4}),
        ("huge count", "/v1/messages/count_tokens", {"model": "x", "messages": [{"role": "user", "content": big}]}),
        ("huge truncate", "/api/embed", {"model": "x", "input": big, "truncate": True}),
        ("deep schema", "/api/chat", {"model": "x", "messages": [{"role": "user", "content": "hi"}], "format": deep,
                                      "stream": False}),
        ("many messages", "/v1/messages/count_tokens", {"model": "x", "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(99_999)]}),
        ("huge fill", "/infill", {"input_prefix": big[:1 << 20], "input_suffix": big[:1 << 20], "n_predict": 4,
                                  "input_extra": [{"text": big[:1 << 20]}] * 4}),
        ("huge raw", "/api/generate", {"model": "x", "prompt": text, "raw": True, "stream": False,
                                       "options": {"num_predict": 4}}),
    ]  # fmt: skip


async def costly(args: argparse.Namespace, phase: Phase, stop: asyncio.Event) -> None:
    kinds = costly_requests(args.n_vocab)
    async with httpx.AsyncClient(base_url=args.base_url, headers=_auth(args), timeout=300) as client:
        i = 0
        while not stop.is_set():
            name, path, body = kinds[i % len(kinds)]
            i += 1
            try:
                r = await client.post(path, json=body)
                phase.count(f"costly {name} {r.status_code}")
            except httpx.HTTPError as e:
                phase.count(f"costly {name} {type(e).__name__}")


# -- the run ------------------------------------------------------------------------------------------------
# each abuser alone, then the three together (what each costs the others, and all of it)
ABUSERS = {
    "clean": (),
    "garbage": (garbage,),
    "disconnects": (disconnects,),
    "slowloris": (slowloris,),
    "abused": (garbage, disconnects, slowloris),
    "costly": (costly,),
    "overloaded": (overload,),
}


async def run_phase(args: argparse.Namespace, kind: str) -> Phase:
    phase = Phase(kind)
    stop = asyncio.Event()
    abusers = [asyncio.ensure_future(f(args, phase, stop)) for f in ABUSERS[kind]]
    if abusers:
        await asyncio.sleep(1.0)  # the abuse is under way before the measured clients start
    cpu0, server0 = time.process_time(), _server_cpu(args)
    await good_clients(args, phase)
    phase.client_cpu_s = time.process_time() - cpu0  # this script's own share of a shared machine
    phase.server_cpu_s = _server_cpu(args) - server0
    stop.set()
    for task in abusers:
        try:
            await asyncio.wait_for(task, 30)
        except Exception as e:  # noqa: BLE001 - an abuser failing is reported, not fatal
            phase.count(f"abuser {type(e).__name__}")
    await asyncio.sleep(0.5)
    phase.healthy = await _healthy(args)
    return phase


async def main_async(args: argparse.Namespace) -> list[Phase]:
    async with httpx.AsyncClient(base_url=args.base_url, headers=_auth(args), timeout=args.timeout) as c:
        warm = Phase("clean")
        await good_request(c, args, PROMPTS[0], warm)  # loads caches and the tuner; not counted
        if warm.lost:
            sys.exit(f"error: the warm-up request failed: {warm.lost_samples[0]}")
    phases = []
    for _ in range(args.rounds):
        for kind in args.phases:
            p = await run_phase(args, kind)
            phases.append(p)
            abuse = ", ".join(f"{k} {v}" for k, v in sorted(p.abuse.items()))
            print(
                f"{kind:<11}: {p.tok_s:7.2f} tok/s, {p.ok} ok, {p.lost} lost, "
                f"{p.retried} waited out a 503, {p.wall_s:.1f} s, server CPU {p.server_cpu_s:.0f} s, healthy {p.healthy}" + (f" | {abuse}" if abuse else ""),
                flush=True,
            )  # fmt: skip
            for s in p.lost_samples[:3]:
                print(f"    lost: {s}", flush=True)
    return phases


def report(phases: list[Phase]) -> dict:
    """Per kind of phase: tok/s per round and its ratio to the clean phase of the same round."""
    kinds = list(dict.fromkeys(p.kind for p in phases))
    rounds = [phases[i : i + len(kinds)] for i in range(0, len(phases), len(kinds))]
    by_kind = {}
    for kind in kinds:
        runs = [(r[0], p) for r in rounds for p in r if p.kind == kind]
        ratios = [p.tok_s / clean.tok_s for clean, p in runs if clean.tok_s]
        by_kind[kind] = {
            "tok_s": [round(p.tok_s, 2) for _, p in runs],
            "ratio_to_clean": [round(x, 3) for x in ratios],
            "ratio_mean": round(statistics.fmean(ratios), 3) if ratios else None,
            "server_cpu_s": [round(p.server_cpu_s, 1) for _, p in runs],
            "client_cpu_s": [round(p.client_cpu_s, 1) for _, p in runs],
        }
    abuse: dict[str, int] = {}
    for p in phases:
        for k, v in p.abuse.items():
            abuse[k] = abuse.get(k, 0) + v
    return {
        "phases": by_kind,
        "lost": sum(p.lost for p in phases),
        "retried_after_503": {k: sum(p.retried for p in phases if p.kind == k) for k in kinds},
        "all_healthy": all(p.healthy for p in phases),
        "abuse": dict(sorted(abuse.items())),
        "server_5xx_to_garbage": abuse.get("garbage 5xx", 0),
        "503_without_retry_after": abuse.get("overload 503 WITHOUT Retry-After", 0),
    }


# -- helpers ------------------------------------------------------------------------------------------------
def _server_cpu(args: argparse.Namespace) -> float:
    """CPU seconds the server this script started has used (0 for a server it did not start)."""
    if not getattr(args, "server_pid", None):
        return 0.0
    import psutil  # noqa: PLC0415

    t = psutil.Process(args.server_pid).cpu_times()
    return t.user + t.system


async def _model_name(client: httpx.AsyncClient) -> str:
    """The served model's name, as Ollama's clients learn it (OpenAI's list where a server, such as
    llama-server, has no Ollama API)."""
    tags = (await client.get("/api/tags")).json()
    if tags.get("models"):
        return tags["models"][0]["model"]
    return (await client.get("/v1/models")).json()["data"][0]["id"]


def _auth(args: argparse.Namespace) -> dict[str, str]:
    return {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}


def _host_port(base_url: str) -> tuple[str, int]:
    u = httpx.URL(base_url)
    return u.host, u.port or 80


async def _healthy(args: argparse.Namespace) -> bool:
    try:
        async with httpx.AsyncClient(base_url=args.base_url, timeout=10) as c:
            return (await c.get("/health")).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(args: argparse.Namespace) -> subprocess.Popen:
    port = _host_port(args.base_url)[1]
    cmd = [sys.executable, "-m", "localspec", "serve", "--target", args.target, "--port", str(port),
           "--parallel", str(args.parallel), "--max-queue", str(args.max_queue), "--no-log", *args.serve_arg]  # fmt: skip
    log = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads would block the server once full
    env = os.environ | {"LOCALSPEC_API_KEY": args.api_key or ""}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
    proc.log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"error: the server exited with {proc.returncode}: {_output(proc)[-2000:]}")
        try:
            if httpx.get(args.base_url + "/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    sys.exit("error: the server did not come up within 300 s")


def _output(proc: subprocess.Popen) -> str:
    proc.log.seek(0)  # type: ignore[attr-defined]
    return proc.log.read()  # type: ignore[attr-defined]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8091")
    p.add_argument(
        "--target", default=None, help="start `localspec serve --target TARGET` (else use --base-url)"
    )
    p.add_argument("--serve-arg", action="append", default=[], help="one more argument for that serve")
    p.add_argument("--parallel", type=int, default=4, help="that server's slots")
    p.add_argument("--max-queue", type=int, default=4, help="that server's queue")
    p.add_argument("--api-key", default="sk-abuse-test")
    p.add_argument("--clients", type=int, default=2, help="well-behaved clients")
    p.add_argument("--requests-per-client", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2, help="rounds of every kind of phase, interleaved")
    p.add_argument("--max-retries", type=int, default=30, help="503s a well-behaved client waits out")
    p.add_argument("--garbage-rate", type=float, default=20, help="garbage requests per second")
    p.add_argument("--disconnect-every", type=float, default=3.0, help="seconds between disconnected streams")
    p.add_argument("--slowloris", type=int, default=50, help="connections that never finish their headers")
    p.add_argument(
        "--burst", type=int, default=None, help="requests per overload burst (default: slots + queue + 4)"
    )
    p.add_argument("--burst-every", type=float, default=5.0)
    p.add_argument(
        "--n-vocab", type=int, default=49152, help="the model's vocabulary (the costly phase's bias)"
    )
    p.add_argument("--phases", default=",".join(ABUSERS),
                   help="the kinds of phase each round runs, clean first (default: all)")  # fmt: skip
    p.add_argument("--costly-min", type=float, default=0.7,
                   help="the well-behaved clients' least throughput in costly phases, as a share of clean")  # fmt: skip
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", default=None, help="also write the report to this file")
    args = p.parse_args()
    args.burst = args.burst or args.parallel + args.max_queue + 4
    args.phases = args.phases.split(",")
    if args.phases[0] != "clean" or not set(args.phases) <= set(ABUSERS):
        sys.exit(f"error: --phases takes kinds of {', '.join(ABUSERS)}, clean first")
    proc = start_server(args) if args.target else None
    args.server_pid = proc.pid if proc is not None else None
    code = 0
    try:
        rep = report(asyncio.run(main_async(args)))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = -9
    if proc is not None:
        rep["server_exit_code"] = code
        rep["server_tracebacks"] = _output(proc).count("Traceback")
    costly_ratio = rep["phases"].get("costly", {}).get("ratio_mean")
    rep["costly_ratio_ok"] = "costly" not in args.phases or (costly_ratio or 0) >= args.costly_min
    rep["costly_5xx"] = sum(  # a 503 (busy, with Retry-After) is an answer; any other 5xx is not
        v for k, v in rep["abuse"].items() if k.startswith("costly ") and k[-3:] in {"500", "502", "504"}
    )
    print(json.dumps(rep, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if k != "api_key"}, **rep}, f, indent=2)
    bad = (
        rep["lost"]
        or not rep["all_healthy"]
        or rep["server_5xx_to_garbage"]
        or rep["503_without_retry_after"]
        or not rep["costly_ratio_ok"]
        or rep["costly_5xx"]
    )
    sys.exit(1 if bad or (proc is not None and (code != 0 or rep["server_tracebacks"])) else 0)


if __name__ == "__main__":
    main()
