"""`localspec bench --kinds fim`: code completion as an editor asks for it. Each problem
(data/fim_problems.jsonl, written for this benchmark) is a file with a hole: the text before and
after it, other files' chunks as context, the reference middle, and a test. Every request goes
through the same FIM layout as /infill (serving/fim.py), greedy, ending where a line is less
indented than the cursor's (llama.vim's n_indent), plain and speculative interleaved, each from a
cold cache; per request: time to first token, total latency, tokens, acceptance, and
whether prefix + middle + suffix passes the problem's test (run in a child Python, 10 s at most).
Ours runs plain, with the tuner's K ("speculative") and at each fixed K asked; with a peer,
llama-server's /infill runs the same problems plain and with the draft at those fixed K
(fim_peer.py), every configuration interleaved problem by problem."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from localspec.bench import fim_peer
from localspec.bench import peer as peer_mod
from localspec.config.settings import Settings
from localspec.errors import LocalspecError
from localspec.serving import fim

TEST_TIMEOUT_S = 10
PEER = "llama-server "  # the peer's configurations are named with this in front


@dataclass(frozen=True)
class Problem:
    id: str
    prefix: str
    suffix: str
    middle: str  # the reference answer (the checker's own test: it passes, an empty middle fails)
    test: str  # Python run after the completed file
    extra: tuple[fim.Extra, ...] = ()
    setup: dict[str, str] = field(default_factory=dict)  # files beside it (what `extra` shows)

    def fill(self) -> fim.Fill:
        return fim.Fill(self.prefix, self.suffix, self.extra)

    @property
    def indent(self) -> int:
        """The cursor line's indentation: the answer ends at a line less indented (llama.vim's
        n_indent), as an editor shows it."""
        line = self.prefix.rsplit("\n", 1)[-1]
        return len(line) - len(line.lstrip(" \t"))


@dataclass(frozen=True)
class Sample:
    problem: str
    config: str
    run: int
    ttft_ms: float
    latency_ms: float
    tokens: int
    acceptance: float
    passed: bool
    middle: str


def load_problems(path: Path | None = None) -> list[Problem]:
    raw = (
        Path(path).read_text("utf-8")
        if path is not None
        else resources.files("localspec").joinpath("data/fim_problems.jsonl").read_text("utf-8")
    )
    out = []
    for i, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            extra = tuple(fim.Extra(c["text"], c.get("filename", "tmp")) for c in d.get("extra", ()))
            out.append(
                Problem(d["id"], d["prefix"], d["suffix"], d["middle"], d["test"], extra, d.get("setup", {}))
            )
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise LocalspecError(
                f"FIM problems line {i}: expected id, prefix, suffix, middle, test ({e})"
            ) from None
    return out


def passes(p: Problem, middle: str) -> bool:
    """Whether the file completed with `middle` passes the problem's test."""
    with tempfile.TemporaryDirectory(prefix="localspec-fim-") as tmp:
        for name, text in p.setup.items():
            (Path(tmp) / name).write_text(text)
        main = Path(tmp) / "completed.py"
        main.write_text(p.prefix + middle + p.suffix + "\n\n" + p.test + "\n")
        try:
            r = subprocess.run(
                [sys.executable, "-E", "-s", str(main)], cwd=tmp, capture_output=True, timeout=TEST_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0


def run_fim(
    settings: Settings,
    *,
    runs: int,
    gen_tokens: int,
    draft_max: Sequence[str] = ("auto",),
    peer: peer_mod.PeerSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Sample]:
    """`draft_max`: "auto" (the tuner) and fixed K, as `bench --draft-max` gives them; `peer`:
    llama-server beside ours, plain and at each fixed K."""
    from localspec.bench.concurrency import PeerServer  # noqa: PLC0415
    from localspec.engine import Engine  # noqa: PLC0415

    say = progress or (lambda msg: None)
    problems = load_problems()
    fixed = [int(k) for k in draft_max if k != "auto"]
    with Engine(settings) as eng, ExitStack() as stack:
        t = eng.target
        base = eng.settings.replace(temperature=0.0, max_tokens=gen_tokens)
        ours = {"plain": base.replace(spec=False)}
        ours |= {
            "speculative" if k == "auto" else f"K={k}": base.replace(draft_max=k if k == "auto" else int(k))
            for k in draft_max
        }
        peers = {}
        for k in [None, *fixed] if peer is not None else ():
            say(f"llama-server {'plain' if k is None else f'K={k}'}: loading")
            peers[PEER + ("plain" if k is None else f"K={k}")] = stack.enter_context(PeerServer(peer, 1, k))
        names = [*ours, *peers]
        bos = t.vocab.bos if t.vocab.add_bos else None
        out = []
        for r in range(runs):
            for i, p in enumerate(problems):
                lay = fim.layout(
                    p.fill(), t.fim_tokens(), lambda x: t.tokenize(x, add_special=False),
                    n_ctx=eng.target_ctx.n_ctx, n_predict=gen_tokens, bos=bos,
                )  # fmt: skip
                shift = (r * len(problems) + i) % len(names)  # interleaved: each goes first in turn
                for name in names[shift:] + names[:shift]:
                    if name in ours:
                        eng.clear_cache()  # each from a cold cache: the second would reuse the first's
                        m = _ours(eng, lay, ours[name].replace(n_indent=p.indent))
                    else:
                        m = fim_peer.infill(peers[name], p, gen_tokens, peer)
                    out.append(Sample(p.id, name, r, *m[:4], passes(p, m.middle), m.middle))
                    say(f"{p.id} {name}: {out[-1].latency_ms:.0f} ms, passed={out[-1].passed}")
    return out


def _ours(eng: Any, lay: fim.Layout, s: Settings) -> fim_peer.Measured:
    t0 = time.perf_counter()
    first = None
    resp = None
    for chunk in eng.submit(lay.ids, settings=s, lookup_text=lay.lookup_text):
        if first is None and chunk.tokens:
            first = time.perf_counter()
        resp = chunk.response or resp
    t1 = time.perf_counter()
    st = resp.stats
    return fim_peer.Measured(
        ((first or t1) - t0) * 1e3, (t1 - t0) * 1e3, st.n_generated,
        st.acceptance_rate if st.speculative else 0.0, resp.text,
    )  # fmt: skip


def summary(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Per configuration: requests, pass rate, median and p90 latency, median time to first
    token, mean tokens and acceptance."""
    rows = []
    for config in dict.fromkeys(s.config for s in samples):
        xs = [s for s in samples if s.config == config]
        lat = sorted(s.latency_ms for s in xs)
        rows.append({
            "config": config, "requests": len(xs), "pass_rate": sum(s.passed for s in xs) / len(xs),
            "median_ms": statistics.median(lat), "p90_ms": lat[min(len(lat) - 1, int(0.9 * len(lat)))],
            "ttft_ms": statistics.median(s.ttft_ms for s in xs),
            "tokens": statistics.mean(s.tokens for s in xs), "acceptance": statistics.mean(s.acceptance for s in xs),
        })  # fmt: skip
    return rows


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = "| config | requests | pass rate | median latency | p90 latency | time to first token | tokens | acceptance |\n"
    head += "|---|---|---|---|---|---|---|---|\n"
    return head + "".join(
        f"| {r['config']} | {r['requests']} | {r['pass_rate']:.0%} | {r['median_ms']:.0f} ms | {r['p90_ms']:.0f} ms "
        f"| {r['ttft_ms']:.0f} ms | {r['tokens']:.1f} | {r['acceptance']:.0%} |\n"
        for r in rows
    )


def to_json(samples: Sequence[Sample]) -> str:
    return json.dumps({"summary": summary(samples), "requests": [asdict(s) for s in samples]}, indent=2)
