"""llama-server's `/infill` beside ours in `bench --kinds fim`: the same problem sent as llama.vim
sends it (prefix, suffix, the other files' chunks, n_indent), greedy, streamed so that the first
token's time is seen, and each from a cold cache (`cache_prompt: false`, as ours clears its
cache); one llama-server per configuration (plain, or the draft at a fixed K), loaded beside our
engine for the whole run so that the two sides interleave."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import TYPE_CHECKING, NamedTuple, Protocol, Sequence

from localspec.bench import peer as peer_mod
from localspec.errors import LocalspecError

if TYPE_CHECKING:
    from localspec.bench.concurrency import PeerServer


class Measured(NamedTuple):
    ttft_ms: float
    latency_ms: float
    tokens: int
    acceptance: float  # accepted / drafted (0 without drafts)
    middle: str


class Chunk(Protocol):
    filename: str
    text: str


class Problem(Protocol):  # what is sent of a bench/fim.py problem (that module imports this one)
    prefix: str
    suffix: str
    extra: Sequence[Chunk]

    @property
    def indent(self) -> int: ...


def body(p: Problem, gen_tokens: int, ps: peer_mod.PeerSettings) -> dict:
    return {
        "input_prefix": p.prefix, "input_suffix": p.suffix,
        "input_extra": [{"filename": c.filename, "text": c.text} for c in p.extra],
        "n_predict": gen_tokens, "n_indent": p.indent, "cache_prompt": False, "stream": True,
        **peer_mod.server_sampling(ps, 0.0),
    }  # fmt: skip


def infill(server: "PeerServer", p: Problem, gen_tokens: int, ps: peer_mod.PeerSettings) -> Measured:
    """One /infill request to llama-server, timed from send to its last frame."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/infill",
        data=json.dumps(body(p, gen_tokens, ps)).encode(),
        headers={"Content-Type": "application/json"},
    )
    t0 = time.perf_counter()
    first, parts, last = None, [], {}
    try:
        with urllib.request.urlopen(req, timeout=server.timeout_s) as r:
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                frame = json.loads(line[6:])
                if frame.get("content"):
                    first = first or time.perf_counter()
                    parts.append(frame["content"])
                if frame.get("stop"):
                    last = frame
                    break
    except OSError as e:
        raise LocalspecError(f"llama-server /infill failed: {e}") from None
    t1 = time.perf_counter()
    tm = last.get("timings", {})
    drafted = tm.get("draft_n", 0)
    return Measured(
        ((first or t1) - t0) * 1e3, (t1 - t0) * 1e3, int(tm.get("predicted_n", last.get("tokens_predicted", 0))),
        tm.get("draft_n_accepted", 0) / drafted if drafted else 0.0, "".join(parts),
    )  # fmt: skip
