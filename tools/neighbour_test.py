"""Issue 60's neighbour bound: does one hostile input, sent by 3 clients at once, slow a
well-behaved neighbour's decoding? For each input, phases alternate (alone, under attack, alone,
...: a shared machine drifts) and the report gives, per input, the neighbour's decode speed alone and
under attack, their ratio (the bound is >= 0.7), the worst /health latency (polled every 0.1 s; the
bound is 1 s) and the server's RSS growth over the phase.

    python -m tools.neighbour_test --target models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --mmproj models/mmproj-smollm2-test.gguf --json /tmp/neighbour.json
    python -m tools.neighbour_test --base-url http://127.0.0.1:8080 --inputs count,embed

The neighbour streams /v1/completions at temperature 0 with the end of text banned, so every request
decodes --max-tokens tokens; its speed is tokens after the first over the time from the first to the
last (decoding, not the wait for a slot or the prompt). The hostile clients each send their input,
wait for the answer and send it again, from before the neighbour starts until it ends, over plain
sockets in a process of their own; every body is encoded once, up front, so the attack's own CPU
stays small (reported, with this script's). Exit 1 when a ratio is under --min-ratio, /health ever
took over --max-health s, or a hostile request got a 5xx other than the 503 of a full server.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import multiprocessing
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx

from tools.abuse_test import _auth, _host_port, _model_name, start_server

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain in a paragraph why the sky is blue.",
    "Describe how a bicycle gear system works.",
]
BIG = 7_800_000  # bytes of text: what the rows sent (just under --max-body's 8,000,000)


# -- the hostile inputs: (path, body) makers, given the served model's name --------------------------
def _text() -> str:
    return ("lorem ipsum dolor sit amet " * (BIG // 27 + 1))[:BIG]


def _calls_responses(model: str) -> tuple[str, dict]:
    calls = [
        {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"} for i in range(60_000)
    ]
    return "/v1/responses", {"model": model, "input": [*calls, {"role": "user", "content": "go"}],
                             "max_output_tokens": 4}  # fmt: skip


def _calls_ollama(model: str) -> tuple[str, dict]:
    calls = [{"function": {"name": "f", "arguments": {"i": i}}} for i in range(60_000)]
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "user", "content": "go"}]  # fmt: skip
    return "/api/chat", {"model": model, "messages": msgs, "stream": False, "options": {"num_predict": 4}}


def _count(model: str) -> tuple[str, dict]:
    return "/v1/messages/count_tokens", {"model": model, "messages": [{"role": "user", "content": _text()}]}


def _count_many(model: str) -> tuple[str, dict]:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(150_000)]
    return "/v1/messages/count_tokens", {"model": model, "messages": msgs}


def _embed(model: str) -> tuple[str, dict]:
    return "/api/embed", {"model": model, "input": _text(), "truncate": True}


def _chat_big(model: str) -> tuple[str, dict]:
    return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": _text()}],
                                    "max_tokens": 4}  # fmt: skip


def _tokenize(model: str) -> tuple[str, dict]:
    return "/tokenize", {"content": _text()[: 1 << 20]}  # the most one request may tokenize


def _deep(model: str) -> tuple[str, dict]:
    deep: dict = {"type": "string"}
    for _ in range(400):
        deep = {"type": "object", "properties": {"x": deep}}
    return "/api/chat", {"model": model, "messages": [{"role": "user", "content": "hi"}], "format": deep,
                         "stream": False}  # fmt: skip


def _strip(model: str) -> tuple[str, dict]:
    return "/v1/chat/completions", _image_chat(model, [_png(1, 1 << 24, 0)])


def _pngs(model: str) -> list[tuple[str, dict]]:
    """Requests of two distinct 4096x4096 PNGs each (blocky, so that two fit in a body): one
    client's sequence never repeats an image within a run."""
    return [("/v1/chat/completions", _image_chat(model, [_png(4096, 4096, 2 * i), _png(4096, 4096, 2 * i + 1)]))
            for i in range(12)]  # fmt: skip


def _chat_small(model: str) -> tuple[str, dict]:
    """A control, not an attack: what three clients' small, accepted requests cost a neighbour
    (they share its engine), beside which the image rows are read."""
    return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Describe."}],
                                    "max_tokens": 4}  # fmt: skip


def _pngs_small(model: str) -> list[tuple[str, dict]]:
    """A control: the 4096² rows' requests with 64² images (the same prompts, little decoding)."""
    return [("/v1/chat/completions", _image_chat(model, [_png(64, 64, 2 * i), _png(64, 64, 2 * i + 1)]))
            for i in range(12)]  # fmt: skip


INPUTS: dict[str, Callable[[str], tuple[str, dict] | list[tuple[str, dict]]]] = {
    "responses-60k-calls": _calls_responses,
    "ollama-60k-calls": _calls_ollama,
    "count-7.8MB": _count,
    "count-150k-messages": _count_many,
    "embed-truncate-7.8MB": _embed,
    "chat-7.8MB": _chat_big,
    "tokenize-1M-chars": _tokenize,
    "deep-schema": _deep,
    "png-1x16M": _strip,
    "png-4096sq": _pngs,
    "control-chat": _chat_small,
    "control-png-64sq": _pngs_small,
}


def _image_chat(model: str, images: list[bytes]) -> dict:
    import base64  # noqa: PLC0415

    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b).decode()}}
             for b in images]  # fmt: skip
    return {"model": model, "max_tokens": 4,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Describe."}, *parts]}]}  # fmt: skip


def _png(width: int, height: int, seed: int) -> bytes:
    import numpy as np  # noqa: PLC0415
    from PIL import Image  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    if height == 1:  # a strip: one row of seeded pixels, tiled
        row = np.tile(rng.integers(0, 256, (1, 64, 3), dtype=np.uint8), (1, width // 64, 1))
        img = Image.fromarray(row)
    else:  # 64x64 seeded blocks, scaled up: distinct per seed, and small once compressed
        img = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).resize((width, height), 0)
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


# -- one phase ------------------------------------------------------------------------------------
@dataclass
class Phase:
    input: str
    attacked: bool
    tokens: int = 0
    decode_s: float = 0.0
    worst_health_s: float = 0.0
    rss0_mb: float = 0.0
    rss_peak_mb: float = 0.0
    cpu_s: float = 0.0  # the server's CPU time over the phase (its threads and children)
    wall_s: float = 0.0
    cut: bool = False  # the neighbour's requests ran past --phase-limit: booked as far as they got
    answers: dict[str, int] = field(default_factory=dict)  # the hostile requests' statuses

    @property
    def tok_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s else 0.0


async def neighbour(client: httpx.AsyncClient, args: argparse.Namespace, phase: Phase) -> None:
    for i in range(args.requests):
        body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": args.max_tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}, "logit_bias": args.ban}  # fmt: skip
        for _ in range(30):  # a 503 is waited out, as a well-behaved client does
            if await _decode(client, body, phase):
                break


async def _decode(client: httpx.AsyncClient, body: dict, phase: Phase) -> bool:
    """One streamed request's decoding, booked in `phase`; False for a 503 (after its Retry-After).
    Cut short (the phase's --phase-limit), the tokens so far are booked: one a chunk."""
    first = last = None
    n = seen = 0
    try:
        async with client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code == 503:
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                return False
            if r.status_code != 200:
                raise RuntimeError(f"the neighbour got HTTP {r.status_code}: {(await r.aread())[:300]!r}")
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                if "error" in (event := json.loads(line[6:])):
                    raise RuntimeError(f"the neighbour's stream failed: {event['error']}")
                if event["choices"] and event["choices"][0].get("text"):
                    last = time.perf_counter()
                    first = first or last
                    seen += 1
                n = (event.get("usage") or {}).get("completion_tokens", n)  # a chunk may hold several
    except asyncio.CancelledError:
        n = seen
        raise
    finally:
        if first is not None and n > 1:
            phase.tokens += n - 1
            phase.decode_s += last - first
    return True


# the hostile clients run in a process of their own, over plain sockets: their sending and reading
# takes neither this process's event loop (the neighbour's timing) nor more CPU than a socket's copy
def attack(base_url: str, auth: dict, bodies: list[tuple[str, bytes]], n: int, stop, out) -> None:  # noqa: ANN001
    """`n` clients, each sending its next body once the last is answered, until `stop` is set;
    puts {status or error: count} on `out`."""
    host, port = _host_port(base_url)
    head = "".join(f"{k}: {v}\r\n" for k, v in auth.items())
    raw = [(f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n{head}"
            f"content-length: {len(data)}\r\n\r\n").encode() + data for path, data in bodies]  # fmt: skip
    answers: dict[str, int] = {}

    async def client(k: int) -> None:
        conn, i = None, k
        while not stop.is_set():
            try:
                conn = conn or await asyncio.open_connection(host, port)
                status, keep = await _post(*conn, raw[i % len(raw)])
                what = str(status)
                if not keep:
                    conn[1].close()
                    conn = None
            except (OSError, ValueError, asyncio.IncompleteReadError) as e:
                what, conn = type(e).__name__, None
            answers[what] = answers.get(what, 0) + 1
            i += n

    async def main() -> None:
        await asyncio.gather(*(client(k) for k in range(n)))

    asyncio.run(main())
    out.put(answers)


async def _post(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bool]:
    """Send one request, read its whole answer: (status, whether the connection stays open)."""
    writer.write(request)
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    status = int(head.split(" ", 2)[1])
    if "transfer-encoding: chunked" in head:
        while (size := int((await reader.readline()).strip() or b"0", 16)) > 0:
            await reader.readexactly(size + 2)
        await reader.readline()
    else:
        length = next((int(ln[15:]) for ln in head.split("\r\n") if ln.startswith("content-length:")), 0)
        await reader.readexactly(length)
    return status, "connection: close" not in head


async def watch(args: argparse.Namespace, phase: Phase, stop: asyncio.Event) -> None:
    """/health's latency and the server's RSS, every 0.1 s."""
    proc = _server_proc(args)
    phase.rss0_mb = phase.rss_peak_mb = _rss_mb(proc)
    cpu0, start = _cpu_s(proc), time.perf_counter()
    async with httpx.AsyncClient(base_url=args.base_url, timeout=30) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                ok = (await c.get("/health")).status_code == 200
            except httpx.HTTPError:
                ok = False
            phase.worst_health_s = max(phase.worst_health_s, time.perf_counter() - t0 if ok else 99.0)
            phase.rss_peak_mb = max(phase.rss_peak_mb, _rss_mb(proc))
            await asyncio.sleep(0.1)
    phase.cpu_s, phase.wall_s = _cpu_s(proc) - cpu0, time.perf_counter() - start


async def run_phase(args: argparse.Namespace, name: str, bodies: list[tuple[str, bytes]] | None) -> Phase:
    phase = Phase(name, bodies is not None)
    watching = asyncio.Event()
    ctx = multiprocessing.get_context("fork")  # the bodies are shared, not sent
    stop, out = ctx.Event(), ctx.Queue()
    attackers = ctx.Process(
        target=attack, args=(args.base_url, _auth(args), bodies, args.attackers, stop, out)
    )
    async with httpx.AsyncClient(base_url=args.base_url, headers=_auth(args), timeout=300) as c:
        watcher = asyncio.ensure_future(watch(args, phase, watching))
        if bodies:
            attackers.start()
            await asyncio.sleep(args.lead)  # the hostile bodies are in flight before the neighbour starts
        try:
            await asyncio.wait_for(neighbour(c, args, phase), args.phase_limit or None)
        except TimeoutError:
            phase.cut = True
        finally:
            if bodies:
                stop.set()  # each client ends with its answer
                phase.answers = await asyncio.get_running_loop().run_in_executor(None, out.get, True, 600)
                attackers.join()
            watching.set()
            await watcher
    return phase


# -- the run --------------------------------------------------------------------------------------
async def main_async(args: argparse.Namespace) -> dict:
    async with httpx.AsyncClient(base_url=args.base_url, headers=_auth(args), timeout=120) as c:
        model = await _model_name(c)
        if args.ban is None:  # the chat template's end and start markers (ChatML's, for these models)
            r = await c.post("/tokenize", json={"content": "<|im_end|><|endoftext|><|im_start|>"})
            args.ban = {str(t): -100 for t in r.json()["tokens"] if len(r.json()["tokens"]) <= 3}
        await neighbour(c, argparse.Namespace(**{**vars(args), "requests": 1}), Phase("warm-up", False))
    out = {}
    for name in args.inputs:
        made = INPUTS[name](model)
        bodies = [(p, json.dumps(b).encode()) for p, b in (made if isinstance(made, list) else [made])]
        phases = []
        for _ in range(args.rounds):
            for attacked in (False, True):
                p = await run_phase(args, name, bodies if attacked else None)
                phases.append(p)
                print(f"{name:<22} {'attack' if attacked else 'alone ':<6} {p.tok_s:7.2f} tok/s  "
                      f"health {p.worst_health_s:5.2f} s  RSS +{p.rss_peak_mb - p.rss0_mb:6.0f} MB  "
                      f"server {p.cpu_s / max(p.wall_s, 1e-9):4.2f} cores  {p.answers}{'  (cut)' if p.cut else ''}",
                      flush=True)  # fmt: skip
        out[name] = summary(phases)
        print(f"{name:<22} ratio {out[name]['ratio']}", flush=True)
    return out


def summary(phases: list[Phase]) -> dict:
    """Ratios of each attacked phase to the mean of the alone phases either side of it."""
    alone = [p for p in phases if not p.attacked]
    attacked = [p for p in phases if p.attacked]
    ratios = []
    for i, a in enumerate(attacked):
        near = [x.tok_s for x in alone[i : i + 2]]  # the one before it, and the one after if any
        ratios.append(a.tok_s / statistics.fmean(near))
    return {
        "alone_tok_s": round(statistics.fmean(p.tok_s for p in alone), 2),
        "attack_tok_s": round(statistics.fmean(p.tok_s for p in attacked), 2),
        "ratio": round(statistics.fmean(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "worst_health_s": round(max(p.worst_health_s for p in attacked), 3),
        "worst_health_alone_s": round(max(p.worst_health_s for p in alone), 3),
        "server_cores_alone": round(statistics.fmean(p.cpu_s / p.wall_s for p in alone), 2),
        "server_cores_attacked": round(statistics.fmean(p.cpu_s / p.wall_s for p in attacked), 2),
        "cut_phases": sum(p.cut for p in phases),
        "rss_growth_mb": round(max(p.rss_peak_mb - p.rss0_mb for p in attacked)),
        "answers": {k: sum(p.answers.get(k, 0) for p in attacked) for k in {k for p in attacked for k in p.answers}},
    }  # fmt: skip


def _server_proc(args: argparse.Namespace):  # noqa: ANN202 - psutil's Process, or None
    if not args.server_pid:
        return None
    import psutil  # noqa: PLC0415

    return psutil.Process(args.server_pid)


def _cpu_s(proc) -> float:  # noqa: ANN001
    if proc is None:
        return 0.0
    return sum(sum(p.cpu_times()[:2]) for p in [proc, *proc.children(recursive=True)])


def _rss_mb(proc) -> float:  # noqa: ANN001
    if proc is None:
        return 0.0
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8092")
    p.add_argument(
        "--target", default=None, help="start `localspec serve --target TARGET` (else use --base-url)"
    )
    p.add_argument("--mmproj", default=None, help="that server's projector (the PNG inputs need one)")
    p.add_argument("--serve-arg", action="append", default=[], help="one more argument for that serve")
    p.add_argument("--parallel", type=int, default=2, help="that server's slots")
    p.add_argument(
        "--max-queue",
        type=int,
        default=2,
        help="that server's queue (slots + queue: the attackers and the neighbour)",
    )
    p.add_argument("--api-key", default=None)
    p.add_argument("--server-pid", type=int, default=None, help="the --base-url server's pid, for its RSS")
    p.add_argument(
        "--inputs",
        default=",".join(k for k in INPUTS if not k.startswith("control")),
        help=f"some of: {', '.join(INPUTS)} (the controls are accepted requests: not by default)",
    )
    p.add_argument("--attackers", type=int, default=3, help="hostile clients, each sending the input")
    p.add_argument("--rounds", type=int, default=3, help="alone / attacked pairs per input")
    p.add_argument("--requests", type=int, default=2, help="the neighbour's requests per phase")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per neighbour request")
    p.add_argument(
        "--phase-limit", type=float, default=120, help="seconds a phase may run (0: no limit); past it, the "
        "tokens decoded so far are booked",
    )  # fmt: skip
    p.add_argument("--lead", type=float, default=1.0, help="seconds the attack runs before the neighbour")
    p.add_argument(
        "--ban", type=json.loads, default=None, help="logit_bias banning the end (default: ChatML's)"
    )
    p.add_argument("--min-ratio", type=float, default=0.7)
    p.add_argument("--max-health", type=float, default=1.0)
    p.add_argument("--json", default=None, help="also write the report to this file")
    args = p.parse_args()
    args.inputs = args.inputs.split(",")
    if not set(args.inputs) <= set(INPUTS):
        sys.exit(f"error: --inputs takes some of {', '.join(INPUTS)}")
    if args.target:
        args.serve_arg += ["--mmproj", args.mmproj] if args.mmproj else []
    proc = start_server(args) if args.target else None
    args.server_pid = proc.pid if proc is not None else args.server_pid
    cpu0 = time.process_time()
    try:
        rep = asyncio.run(main_async(args))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the attackers' (and the server's, if started)
    report = {"inputs": rep, "client_cpu_s": round(time.process_time() - cpu0, 1),
              "children_cpu_s": round(kids.ru_utime + kids.ru_stime, 1)}  # fmt: skip
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": {k: v for k, v in vars(args).items() if k != "api_key"}, **report}, f, indent=2
            )
    bad = [n for n, r in rep.items() if r["ratio"] < args.min_ratio or r["worst_health_s"] > args.max_health
           or any(k.startswith("5") and k != "503" for k in r["answers"])]  # fmt: skip
    if bad:
        print(f"over the bounds: {', '.join(bad)}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
