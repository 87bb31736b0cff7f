"""Load an OpenAI-compatible server at several concurrency levels; report aggregate tok/s, time to
first token (p50/p95) and errors. Any base URL works, so the same run measures `localspec serve` and
llama.cpp's `llama-server` serving the same pair:

    localspec serve --pair models/default &                      # :8080
    llama-server -m target.gguf -md draft.gguf --port 8081 -np 8 &
    python tools/load_test.py --base-url http://127.0.0.1:8080/v1 --json local.json
    python tools/load_test.py --base-url http://127.0.0.1:8081/v1 --json peer.json

Each level runs `concurrency` clients in a closed loop (a client sends its next request when the
previous one ends) over streamed chat completions at temperature 0. Tokens are counted from the
server's usage (stream_options.include_usage) when it sends one, else one per content chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass, field

import openai

PROMPTS = [
    "Explain in a paragraph why the sky is blue.",
    "Write a short story about a lighthouse keeper.",
    "List five tips for writing clear Python code, with a sentence each.",
    "Describe how a bicycle gear system works.",
    "Summarise the plot of a detective novel you invent.",
    "What are the trade-offs between trains and planes for a 500 km trip?",
    "Write a friendly email inviting a colleague to lunch.",
    "Explain recursion to a twelve-year-old.",
]


@dataclass
class Level:
    concurrency: int
    requests: int = 0
    errors: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        ttft = sorted(self.ttft_s)
        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "tokens": self.tokens,
            "wall_s": round(self.wall_s, 2),
            "tok_s": round(self.tokens / self.wall_s, 2) if self.wall_s else 0.0,
            "ttft_p50_ms": round(_pct(ttft, 50) * 1e3, 1) if ttft else None,
            "ttft_p95_ms": round(_pct(ttft, 95) * 1e3, 1) if ttft else None,
            "error_samples": self.error_samples[:3],
        }


def _pct(sorted_values: list[float], p: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[int(p) - 1]


async def one_request(
    client: openai.AsyncOpenAI, model: str, prompt: str, max_tokens: int, level: Level
) -> None:
    t0 = time.perf_counter()
    first = None
    chunks = 0
    usage = None
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for c in stream:
            if c.usage is not None:
                usage = c.usage
            if c.choices and c.choices[0].delta.content:
                chunks += 1
                if first is None:
                    first = time.perf_counter() - t0
    except Exception as e:  # counted, not fatal: errors are one of the things measured
        level.errors += 1
        level.error_samples.append(f"{type(e).__name__}: {e}"[:200])
        return
    level.requests += 1
    level.tokens += usage.completion_tokens if usage is not None else chunks
    if first is not None:
        level.ttft_s.append(first)


def _client(args: argparse.Namespace) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=args.timeout
    )


async def run_level(args: argparse.Namespace, model: str, concurrency: int) -> Level:
    level = Level(concurrency)
    client = _client(args)
    n_each = args.requests_per_client

    async def worker(w: int) -> None:
        for i in range(n_each):
            prompt = PROMPTS[(w * n_each + i) % len(PROMPTS)]
            await one_request(client, model, prompt, args.max_tokens, level)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    level.wall_s = time.perf_counter() - t0
    await client.close()
    return level


async def main_async(args: argparse.Namespace) -> list[dict]:
    client = _client(args)
    try:
        model = args.model or (await client.models.list()).data[0].id
    except openai.APIError as e:
        sys.exit(f"error: cannot list models at {args.base_url}: {e}")
    warm = Level(0)  # loads caches and the tuner; not counted
    await one_request(client, model, PROMPTS[0], 8, warm)
    await client.close()
    if warm.errors:
        sys.exit(f"error: the warm-up request failed: {warm.error_samples[0]}")
    results = []
    for c in args.concurrency:
        level = await run_level(args, model, c)
        s = level.summary()
        results.append(s)
        print(
            f"concurrency {c:>2}: {s['tok_s']:>8.2f} tok/s aggregate, TTFT p50 {s['ttft_p50_ms']} ms "
            f"p95 {s['ttft_p95_ms']} ms, {s['requests']} ok, {s['errors']} errors ({s['wall_s']} s)",
            flush=True,
        )
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default=None, help="default: the first one /v1/models lists")
    p.add_argument("--concurrency", default="1,2,4,8", help="comma-separated levels")
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args()
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        sys.exit(f"error: --concurrency takes numbers like 1,2,4,8 (got {args.concurrency!r})")
    results = asyncio.run(main_async(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"base_url": args.base_url, "max_tokens": args.max_tokens, "levels": results}, f, indent=2
            )


if __name__ == "__main__":
    main()
